package sender

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestRateLimitPacesClaimsOnTheInjectedClock: with sender.rate_limit 10
// per second and a burst of a batch (5), the dispatcher may claim a whole
// batch at once, then one row per 100 ms of the pool's clock: a claim
// waits for its token on the clock, and no real time passes in the test.
func TestRateLimitPacesClaimsOnTheInjectedClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := clockwork.NewFakeClock()
	p := &dispatcher{clock: clk, limiter: rate.NewLimiter(10, 5)}
	require.Equal(t, 5, p.takeTokens(ctx, 5), "the burst: a whole batch at once")

	got := make(chan int, 1)
	go func() { got <- p.takeTokens(ctx, 5) }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1), "the claim waits on the clock")
	clk.Advance(99 * time.Millisecond)
	select {
	case n := <-got:
		t.Fatalf("claimed %d rows before the next token was due", n)
	default:
	}
	clk.Advance(time.Millisecond)
	require.Equal(t, 1, <-got, "one token per 100 ms after the burst")

	clk.Advance(300 * time.Millisecond)
	require.Equal(t, 3, p.takeTokens(ctx, 5), "the three tokens of 300 ms, no more")
}

// TestRateLimitWaitEndsWithTheContext: a claim waiting for its token
// takes none when its context ends, and leaves the token for the next.
func TestRateLimitWaitEndsWithTheContext(t *testing.T) {
	clk := clockwork.NewFakeClock()
	p := &dispatcher{clock: clk, limiter: rate.NewLimiter(1, 1)}
	require.Equal(t, 1, p.takeTokens(context.Background(), 3))

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int, 1)
	go func() { got <- p.takeTokens(ctx, 3) }()
	require.NoError(t, clk.BlockUntilContext(context.Background(), 1))
	cancel()
	require.Equal(t, 0, <-got, "no row claimed once the context ended")
	clk.Advance(time.Second)
	require.Equal(t, 1, p.takeTokens(context.Background(), 3), "the cancelled reservation gave its token back")
}

// TestLingerHoldsOutcomesForTheNextMark: a write of outcomes alone waits
// up to OutcomeLinger on the pool's clock and takes the requests that
// come meanwhile, up to the first mark (which must not wait): the
// outcomes and that mark go in one commit. With no mark it goes alone
// once the linger ended; with OutcomeLinger 0 it never waits.
func TestLingerHoldsOutcomesForTheNextMark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := clockwork.NewFakeClock()
	c := &completer{clock: clk, cfg: Config{OutcomeLinger: 5 * time.Millisecond}, writes: make(chan *writeRequest, 8)}
	out := &writeRequest{out: &result{}}
	got := make(chan []*writeRequest, 1)

	go func() { got <- c.linger([]*writeRequest{out}) }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1), "the linger waits on the clock")
	other, mark, late := &writeRequest{out: &result{}}, &writeRequest{start: &job{}}, &writeRequest{out: &result{}}
	c.writes <- other
	c.writes <- mark
	require.Equal(t, []*writeRequest{out, other, mark}, <-got, "up to the first mark, no time passed")
	c.writes <- late

	go func() { got <- c.linger([]*writeRequest{out}) }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	require.Equal(t, []*writeRequest{out, late}, drainUntil(t, clk, got, 5*time.Millisecond), "alone but for what came, after 5 ms")

	c.cfg.OutcomeLinger = 0
	require.Equal(t, []*writeRequest{out}, c.linger([]*writeRequest{out}))
}

// drainUntil advances clk by d and returns what got then holds.
func drainUntil(t *testing.T, clk *clockwork.FakeClock, got chan []*writeRequest, d time.Duration) []*writeRequest {
	t.Helper()
	select {
	case b := <-got:
		t.Fatalf("the linger ended before its time with %d requests", len(b))
	default:
	}
	clk.Advance(d - time.Nanosecond)
	select {
	case b := <-got:
		t.Fatalf("the linger ended before its time with %d requests", len(b))
	default:
	}
	clk.Advance(time.Nanosecond)
	return <-got
}
