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
