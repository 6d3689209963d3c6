package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

// part is a component whose Stop takes a given time, or, with hang, does
// not return until the test ends, whatever its context says. It records
// when Stop was called and what Stop saw.
type part struct {
	stopTakes time.Duration
	hang      chan struct{}
	broken    bool // it stops by itself right after Start

	mu        sync.Mutex
	stopAt    time.Time
	stoppedAt time.Time
	ctxErr    error
	done      chan struct{}
	err       error
}

func (p *part) Start(context.Context) error {
	if p.broken {
		done := p.Done()
		p.mu.Lock()
		p.err = errors.New("broken by the test")
		close(p.done)
		p.mu.Unlock()
		<-done
	}
	return nil
}

// Done is closed only for a broken part: the others never fail, and their
// Stop is what the tests watch.
func (p *part) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

func (p *part) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *part) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopAt = time.Now()
	p.mu.Unlock()
	if p.hang != nil {
		<-p.hang
		return nil
	}
	t := time.NewTimer(p.stopTakes) // the work a stop has to finish
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stoppedAt, p.ctxErr = time.Now(), ctx.Err()
	return ctx.Err()
}

func (p *part) times() (stopAt, stoppedAt time.Time, ctxErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopAt, p.stoppedAt, p.ctxErr
}

// A component that never stops is abandoned after its own budget; the
// one beside it, which takes longer than that, still gets all of its
// own; the last stage starts after both.
func TestStopGivesEachComponentItsOwnBudget(t *testing.T) {
	t.Parallel()
	hung := &part{hang: make(chan struct{})}
	t.Cleanup(func() { close(hung.hang) })
	slow := &part{stopTakes: 2 * time.Second}
	last := &part{}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	begin := time.Now()
	err := run(ctx, slog.New(slog.NewJSONHandler(logs, nil)), []named{
		{name: "last", c: last, stage: stopLast},
		{name: "hung", c: hung, budget: 100 * time.Millisecond},
		{name: "slow", c: slow, budget: 4 * time.Second},
	})
	require.NoError(t, err)
	require.Less(t, time.Since(begin), 4*time.Second)

	_, slowDone, slowErr := slow.times()
	require.NoError(t, slowErr, "slow finished its stop inside its own budget")
	require.Greater(t, slowDone.Sub(begin), 100*time.Millisecond+abandonGrace, "past the hung one's abandonment")
	lastAt, _, _ := last.times()
	require.False(t, lastAt.Before(slowDone), "the last stage starts after the first")
	require.Contains(t, logs.String(), `"msg":"component did not stop within its budget; abandoned","component":"hung"`)
}

// A component that stops by itself stops every component; its error is
// returned, with a log line.
func TestFailedComponentStopsTheDaemon(t *testing.T) {
	t.Parallel()
	broken, other := &part{broken: true}, &part{}
	logs := &syncBuffer{}
	err := run(context.Background(), slog.New(slog.NewJSONHandler(logs, nil)),
		[]named{{name: "broken", c: broken}, {name: "other", c: other, stage: stopLast}})
	require.EqualError(t, err, "broken failed: broken by the test")
	for _, p := range []*part{broken, other} {
		at, _, _ := p.times()
		require.False(t, at.IsZero(), "stopped")
	}
	require.Contains(t, logs.String(), `"msg":"a component failed; stopping","error":"broken failed: broken by the test"`)
}

// An HTTP server that stops serving by itself has failed: Done closes and
// Err says why, which stops the daemon (TestFailedComponentStopsTheDaemon).
func TestHTTPServerFailureIsFatal(t *testing.T) {
	t.Parallel()
	h := newHTTPServer(config.HTTP{Addr: "127.0.0.1:0"}, prometheus.NewRegistry(), &[]ReadyCheck{}, slog.New(slog.DiscardHandler))
	require.NoError(t, h.Start(context.Background()))
	defer func() { _ = h.Stop(context.Background()) }()
	code, _ := get(t, h.addr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, h.ln.Close())
	select {
	case <-h.Done():
		require.True(t, strings.HasPrefix(h.Err().Error(), "serve http on "+h.addr), h.Err().Error())
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not report its failure")
	}
}

// A component that stops while the daemon stops is no failure.
func TestStoppedComponentIsNoFailure(t *testing.T) {
	t.Parallel()
	h := newHTTPServer(config.HTTP{Addr: "127.0.0.1:0"}, prometheus.NewRegistry(), &[]ReadyCheck{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	logs := &syncBuffer{}
	require.NoError(t, run(ctx, slog.New(slog.NewJSONHandler(logs, nil)), []named{{name: "http", c: h}}))
	<-h.Done()
	require.NoError(t, h.Err())
	require.NotContains(t, logs.String(), "failed")
}

// The bound docs/operating.md gives: sender.shutdown_timeout + 13 s, 33 s by default.
func TestShutdownBoundIsTheDocumentedOne(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{}
	cfg.Sender.ShutdownTimeout = 20 * time.Second
	require.Equal(t, 33*time.Second, ShutdownBound(cfg))
	cfg.Sender.ShutdownTimeout = 6 * time.Second
	require.Equal(t, 19*time.Second, ShutdownBound(cfg))
}
