package broker_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// reconnects is a slog.Handler that keeps the failures attribute of every
// "broker connection lost, reconnecting" record.
type reconnects struct {
	mu       sync.Mutex
	failures []int64
}

func (h *reconnects) Enabled(context.Context, slog.Level) bool { return true }
func (h *reconnects) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *reconnects) WithGroup(string) slog.Handler            { return h }

func (h *reconnects) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "broker connection lost, reconnecting" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "failures" {
			h.mu.Lock()
			h.failures = append(h.failures, a.Value.Int64())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *reconnects) since(n int) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.failures[min(n, len(h.failures)):]...)
}

// A publisher's connection is healthy once its confirm channel is open:
// the backoff starts again from its first step then, so after repeated
// outages the publisher is back within the shortest delays (the relay
// publishes through SupervisePublisher). Default backoff: 500 ms doubling
// to 30 s; each outage lasts three failed reconnects.
func TestSupervisePublisherIsBackPromptlyAfterRepeatedOutages(t *testing.T) {
	t.Parallel()
	px := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	logs := &reconnects{}
	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan struct{}, 8)
	done := make(chan error, 1)
	cfg := broker.Config{URL: px.RewriteURL(t, brokertest.URL()), Name: "mailsvc-supervise-test"}
	go func() {
		done <- broker.SupervisePublisher(ctx, cfg, slog.New(logs), nil, func(ctx context.Context, pub *broker.Publisher) error {
			// Unroutable without mandatory: the broker confirms and drops it.
			if err := pub.Publish(ctx, broker.Message{RoutingKey: "mailsvc.supervise-test.nowhere", Body: []byte("x")}); err != nil {
				return err
			}
			published <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	const cuts, bound = 4, 5 * time.Second
	waitPublished := func(what string) time.Duration {
		start := time.Now()
		select {
		case <-published:
			return time.Since(start).Round(time.Millisecond)
		case <-time.After(bound):
			t.Fatalf("%s: no publish within %s", what, bound)
			return 0
		}
	}
	waitPublished("first connection")
	took := make([]time.Duration, 0, cuts)
	for cut := 1; cut <= cuts; cut++ {
		before := len(logs.since(0))
		px.Cut()
		require.Eventually(t, func() bool { return len(logs.since(before)) >= 3 }, 30*time.Second, 10*time.Millisecond, "cut %d", cut)
		require.Equal(t, []int64{1, 2, 3}, logs.since(before)[:3], "cut %d: the backoff starts again from its first step", cut)
		px.Restore(t)
		took = append(took, waitPublished("after the broker's return"))
	}
	t.Logf("from the broker's return to a confirmed publish, cut by cut: %v", took)
}
