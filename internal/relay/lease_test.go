package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
)

// leaders samples the mailsvc_relay_leader gauges of several relays every
// few milliseconds until the test ends, and remembers the largest sum.
type leaders struct {
	t    *testing.T
	ms   []*relay.Metrics
	mu   sync.Mutex
	max  float64
	stop chan struct{}
	done chan struct{}
}

func sampleLeaders(t *testing.T, ms ...*relay.Metrics) *leaders {
	l := &leaders{t: t, ms: ms, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	t.Cleanup(l.close)
	return l
}

func (l *leaders) run() {
	defer close(l.done)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			sum := l.sum()
			l.mu.Lock()
			l.max = max(l.max, sum)
			l.mu.Unlock()
		}
	}
}

func (l *leaders) sum() float64 {
	s := 0.0
	for _, m := range l.ms {
		s += value(l.t, m.Leader)
	}
	return s
}

// maxSum is the largest number of replicas seen leading at once.
func (l *leaders) maxSum() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

func (l *leaders) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// sentCount is mailsvc_relay_published_total{event_type="EmailSent"} of m.
func sentCount(t *testing.T, m *relay.Metrics) float64 {
	return value(t, m.Published.WithLabelValues(string(mailtype.EmailSent)))
}

// second starts another relay with its own metrics on store b.writer (a
// direct connection) or on the bundle's relay store, stopped at the end.
func (b *bundle) second(t *testing.T, direct bool) (*relay.Relay, *relay.Metrics) {
	t.Helper()
	m := relay.NewMetrics(prometheus.NewRegistry())
	st := b.relayStore
	if direct {
		st = b.writer
	}
	r, err := relay.New(b.cfg, st, testLogger(t), m, nil)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { stopNow(t, r) })
	return r, m
}

// TestPartitionedLeaderStepsDownAndTheStandbyDrainsEachRowOnce: the
// leader's database link goes silent while the leader itself keeps running
// (a partition). It must stop leading by itself before its lease can
// expire, and the standby must take over and publish every pending row
// exactly once; at no moment do two replicas report mailsvc_relay_leader 1.
func TestPartitionedLeaderStepsDownAndTheStandbyDrainsEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{vanishingDB: true})
	obs := observe(t, b.names, "#")
	cut := b.newRelay(t, nil)
	b.start(t, cut)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	_, m2 := b.second(t, true)
	l := sampleLeaders(t, b.m, m2)
	b.insert(t, feedbackBatch("before", 10)...)
	require.Eventually(t, func() bool { return b.countPublished(t) == 10 }, 20*time.Second, 10*time.Millisecond)
	sent := func(m *relay.Metrics) float64 { return sentCount(t, m) }
	require.Eventually(t, func() bool { return sent(b.m) == 10 }, 10*time.Second, 10*time.Millisecond)

	b.dbLink.Blackhole()
	vanished := time.Now()
	b.insert(t, feedbackBatch("after", 40)...)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 0 }, 10*time.Second, 5*time.Millisecond)
	stepped := time.Since(vanished)
	require.Eventually(t, func() bool { return b.countPublished(t) == 50 }, 30*time.Second, 10*time.Millisecond)
	took := time.Since(vanished)
	t.Logf("the cut-off leader stepped down after %s; the standby drained the outbox after %s",
		stepped.Round(time.Millisecond), took.Round(time.Millisecond))
	require.Less(t, stepped, b.cfg.Lease-b.cfg.LeaseRenew+time.Second, "it steps down before its lease can expire")
	require.Less(t, took, b.cfg.Lease+5*time.Second)
	requireEachOnce(t, b, obs, 50)
	require.Equal(t, 10.0, sent(b.m), "the cut-off leader published nothing more")
	require.Eventually(t, func() bool { return sent(m2) == 40 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value(t, m2.Leader))
	require.Equal(t, 0.0, value(t, b.m.Leader))
	require.LessOrEqual(t, l.maxSum(), 1.0, "never two leaders at once")

	// Stopping it: pgx takes up to 15 s to close a connection whose server
	// stopped answering mid-statement; Stop waits for that while it may.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	require.NoError(t, cut.Stop(ctx))
	t.Logf("the cut-off relay stopped in %s", time.Since(began).Round(time.Millisecond))
}

// TestTwoRelaysThroughATransactionPoolerPublishEachRowOnce runs two relays
// through a pooler that hands their statements to rotating server
// connections between transactions (PgBouncer pool_mode=transaction):
// the lease needs no session state, so exactly one of them leads, every
// row is published once, and the other takes over when the leader stops.
func TestTwoRelaysThroughATransactionPoolerPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{txPool: 2})
	obs := observe(t, b.names, "#")
	first := b.newRelay(t, nil)
	b.start(t, first)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	// The first batch published proves the leader's broker connection is
	// up: on a loaded machine its first connect can outlast the test's
	// step-down time (400 ms), and the standby would lead from the start.
	b.insert(t, feedbackBatch("a", 10)...)
	require.Eventually(t, func() bool { return b.countPublished(t) == 10 }, 30*time.Second, 10*time.Millisecond)
	_, m2 := b.second(t, false)
	l := sampleLeaders(t, b.m, m2)
	for i := 1; i < 10; i++ {
		b.insert(t, feedbackBatch(string(rune('a'+i)), 10)...)
	}
	require.Eventually(t, func() bool { return b.countPublished(t) == 100 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value(t, b.m.Leader))
	require.Equal(t, 0.0, value(t, m2.Leader))

	stopNow(t, first)
	b.insert(t, feedbackBatch("late", 20)...)
	require.Eventually(t, func() bool { return b.countPublished(t) == 120 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value(t, m2.Leader))
	requireEachOnce(t, b, obs, 120)
	sent := func(m *relay.Metrics) float64 { return sentCount(t, m) }
	require.Equal(t, 100.0, sent(b.m))
	require.Eventually(t, func() bool { return sent(m2) == 20 }, 10*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, l.maxSum(), 1.0, "never two leaders at once")
}
