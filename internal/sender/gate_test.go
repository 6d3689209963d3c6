package sender

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// racingStore answers a read of the provider state with the state before
// the breaker opened, and only after the test lets it: the read began
// before the write that opens the breaker committed.
type racingStore struct {
	ProviderStore
	reading, release chan struct{}
}

func (s *racingStore) ProviderState(context.Context, string) (store.ProviderState, error) {
	close(s.reading)
	<-s.release
	return store.ProviderState{Provider: "smtp", Failures: 2, Now: time.Now()}, nil
}

func (s *racingStore) CountProviderFailure(context.Context, string, int, time.Duration, string) (store.ProviderState, bool, error) {
	now := time.Now()
	return store.ProviderState{Provider: "smtp", Reason: mailtype.PauseBreaker, PausedAt: now, PausedUntil: now.Add(time.Second),
		Failures: 3, Now: now}, true, nil
}

// A refresh that read the shared state before this replica's own write
// opened the breaker must not close it again in the local view: the
// worker would send the next mail as if the provider were healthy.
func TestRefreshOverlappingAWriteKeepsTheNewerState(t *testing.T) {
	st := &racingStore{reading: make(chan struct{}), release: make(chan struct{})}
	g := &gate{clock: clockwork.NewRealClock(), name: "smtp", st: st, m: NewMetrics(nil), log: slog.New(slog.DiscardHandler),
		cfg: Config{DBTimeout: time.Second, BreakerThreshold: 3, BreakerProbe: time.Second}}
	done := make(chan error)
	go func() { done <- g.refresh(context.Background()) }()
	<-st.reading
	require.Equal(t, 3, g.failure(TroubleConfig, "535 5.7.8 authentication failed"))
	require.True(t, g.paused(), "the write opened the breaker")
	close(st.release)
	require.NoError(t, <-done)
	require.True(t, g.paused(), "the older read is dropped")
	require.Equal(t, 3, g.state.Failures)
}

// slowWriteStore is racingStore whose failure count also waits: the
// write starts, then a refresh starts and reads the state from before
// the write's commit, and only then does the write finish.
type slowWriteStore struct {
	*racingStore
	writing, proceed chan struct{}
}

func (s *slowWriteStore) CountProviderFailure(ctx context.Context, p string, n int, d time.Duration, e string) (store.ProviderState, bool, error) {
	close(s.writing)
	<-s.proceed
	return s.racingStore.CountProviderFailure(ctx, p, n, d, e)
}

// A refresh that began while this replica's write was on its way (after
// the write started, before it committed) read the older state too: it
// must not close the breaker the write opened either.
func TestRefreshStartedDuringAWriteKeepsTheNewerState(t *testing.T) {
	st := &slowWriteStore{racingStore: &racingStore{reading: make(chan struct{}), release: make(chan struct{})},
		writing: make(chan struct{}), proceed: make(chan struct{})}
	g := &gate{clock: clockwork.NewRealClock(), name: "smtp", st: st, m: NewMetrics(nil), log: slog.New(slog.DiscardHandler),
		cfg: Config{DBTimeout: time.Second, BreakerThreshold: 3, BreakerProbe: time.Second}}
	failures := make(chan int)
	go func() { failures <- g.failure(TroubleConfig, "connection refused") }()
	<-st.writing
	refreshed := make(chan error)
	go func() { refreshed <- g.refresh(context.Background()) }()
	<-st.reading
	close(st.proceed)
	require.Equal(t, 3, <-failures)
	require.True(t, g.paused(), "the write opened the breaker")
	close(st.release)
	require.NoError(t, <-refreshed)
	require.True(t, g.paused(), "the read that overlapped the write is dropped")
	require.Equal(t, 3, g.state.Failures)
}

// A mail that found its route paused waits until the pause may end; when
// the pause ended between the route's answer and this reckoning (a rate
// limit's end, at its time), it is due after a poll interval, not the
// minute a route with no pause end at all would wait.
func TestResumeInAfterThePauseEnded(t *testing.T) {
	const poll = 50 * time.Millisecond
	clk := clockwork.NewFakeClock()
	g := &gate{clock: clk, name: "resend", lat: newLatency(Config{}), m: NewMetrics(nil)}
	p := &router{clock: clk, cfg: Config{PollInterval: poll}, gates: []*gate{g}}
	require.Equal(t, poll, p.resumeIn(), "no pause left")

	now := clk.Now()
	g.state = store.ProviderState{Provider: "resend", Reason: mailtype.PauseRateLimited, PausedUntil: now.Add(2 * time.Second), Now: now}
	g.readAt = now
	require.Equal(t, 2*time.Second, p.resumeIn(), "until the rate limit's end")
	clk.Advance(1500 * time.Millisecond)
	require.Equal(t, 500*time.Millisecond, p.resumeIn(), "what is left of it")
	clk.Advance(time.Second)
	require.Equal(t, poll, p.resumeIn(), "the pause ended: due after a poll interval")

	g.state = store.ProviderState{Provider: "resend", Reason: mailtype.PauseBreaker, PausedUntil: clk.Now().Add(time.Hour), Now: clk.Now()}
	g.readAt = clk.Now()
	require.Equal(t, time.Minute, p.resumeIn(), "at most a minute before the next look")
}
