package sender_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const from = "Cửa hàng <orders@example.com>"

// testConfig is a pool configuration with short times for tests.
func testConfig() sender.Config {
	return sender.Config{
		Workers: 2, BatchSize: 5, Lease: 3 * time.Second, SendTimeout: time.Second, MaxAttempts: 5,
		RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 40 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second, From: from,
		DBTimeout: 5 * time.Second, WorkerID: "test",
	}
}

// bundle is one test's database schema and SMTP server.
type bundle struct {
	sc  *storetest.Schema
	srv *smtptest.Server
}

func setup(t *testing.T, o smtptest.Options) *bundle {
	t.Helper()
	return &bundle{sc: storetest.New(t), srv: smtptest.New(t, o)}
}

func (b *bundle) smtpProvider(t *testing.T, mode string) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{Host: b.srv.Host, Port: b.srv.Port, TLS: mode, TLSConfig: b.srv.ClientTLSConfig(), HELO: "test.local"})
	require.NoError(t, err)
	return p
}

// start builds and starts a pool on the bundle's store (unless deps sets
// another) and stops it when the test ends.
func (b *bundle) start(t *testing.T, cfg sender.Config, deps sender.Deps) (*sender.Pool, *sender.Metrics) {
	t.Helper()
	if deps.Store == nil {
		deps.Store = b.sc.Store
	}
	if deps.Provider == nil {
		deps.Provider = b.smtpProvider(t, smtp.TLSNone)
	}
	if deps.Metrics == nil {
		deps.Metrics = sender.NewMetrics(nil)
	}
	p, err := sender.New(cfg, deps)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, p.Stop(ctx))
	})
	return p, deps.Metrics
}

func (b *bundle) insert(t *testing.T, orderID string) int64 {
	t.Helper()
	id, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: orderID})
	require.NoError(t, err)
	return id
}

// count runs a count query in the test's schema.
func (b *bundle) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	return b.sc.QueryInt(t, q, args...)
}

// waitRow waits until the row id has status and attempts.
func (b *bundle) waitRow(t *testing.T, id int64, status mailtype.Status, attempts int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = $2 AND attempts = $3`, id, string(status), attempts) == 1
	}, 15*time.Second, 10*time.Millisecond, "mail %d never reached %s with %d attempts", id, status, attempts)
}

// events counts the outbox rows of type typ.
func (b *bundle) events(t *testing.T, typ mailtype.EventType) int64 {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM outbox WHERE event_type = $1`, string(typ))
}

func attempts(m *sender.Metrics, provider, outcome string) int {
	return int(value(m.Attempts.WithLabelValues(provider, outcome)))
}

// gauge reads a gauge.
func gauge(g prometheus.Gauge) float64 {
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		panic(err)
	}
	return d.GetGauge().GetValue()
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}

// histogram reads a histogram's sample count and sum.
func histogram(h prometheus.Histogram) (uint64, float64) {
	var d dto.Metric
	if err := h.Write(&d); err != nil {
		panic(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

// flakyStore injects database faults into a real store.
type flakyStore struct {
	sender.Store
	finishFailures atomic.Int32
	// partitioned fails claims and renewals (the writes of outcomes still
	// go through: the partition heals before them).
	partitioned atomic.Bool
	// renewalsFail fails lease renewals only.
	renewalsFail atomic.Bool
	// markDelay (nanoseconds) delays every send-started mark, or with
	// everyOtherMark only every second one (marks committing at uneven
	// distances from their send slots, as a loaded database makes them).
	markDelay      atomic.Int64
	everyOtherMark atomic.Bool
	marks          atomic.Int32
}

// FinishAndStart fails while finishFailures lasts (when there are
// outcomes), and delays marks by markDelay.
func (f *flakyStore) FinishAndStart(ctx context.Context, as []store.Attempt, starts []store.Fence, lease store.StartLease) ([]store.AttemptResult, []store.Started, error) {
	if len(as) > 0 && f.finishFailures.Add(-1) >= 0 {
		return nil, nil, errInjected
	}
	if len(starts) > 0 {
		n := f.marks.Add(1)
		if d := time.Duration(f.markDelay.Load()); d > 0 && (!f.everyOtherMark.Load() || n%2 == 0) {
			slow := time.NewTimer(d) // a slow database, the fault under test
			select {
			case <-slow.C:
			case <-ctx.Done():
				slow.Stop()
				return nil, nil, ctx.Err()
			}
		}
	}
	return f.Store.FinishAndStart(ctx, as, starts, lease)
}

func (f *flakyStore) ClaimMails(ctx context.Context, p store.ClaimParams) ([]store.ClaimedMail, error) {
	if f.partitioned.Load() {
		return nil, errInjected
	}
	return f.Store.ClaimMails(ctx, p)
}

var errInjected = mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, errors.New("injected database error"))

func (f *flakyStore) RenewLeases(ctx context.Context, fs []store.Fence, lease time.Duration) ([]store.Fence, error) {
	if f.partitioned.Load() || f.renewalsFail.Load() {
		return nil, errInjected
	}
	return f.Store.RenewLeases(ctx, fs, lease)
}

// stallProvider's sessions report each mail on started, then wait for
// release (ignoring their deadline, like a frozen process) and report
// success.
type stallProvider struct {
	started chan string
	release chan struct{}
}

func newStallProvider() *stallProvider {
	return &stallProvider{started: make(chan string, 16), release: make(chan struct{})}
}

func (p *stallProvider) Name() string                     { return "smtp" }
func (p *stallProvider) IdempotencyWindow() time.Duration { return 0 }
func (p *stallProvider) NewSession() sender.Session       { return stallSession{p} }

type stallSession struct{ p *stallProvider }

func (s stallSession) Send(_ context.Context, m *sender.Message) (sender.Receipt, error) {
	s.p.started <- m.DedupeKey
	<-s.p.release
	return sender.Receipt{ProviderMessageID: "stalled-ok"}, nil
}

func (stallSession) Close() error { return nil }

// policyTemplates overrides the ambiguous policy of every template.
type policyTemplates mailtype.AmbiguousPolicy

func (p policyTemplates) Settings(string) (templates.Settings, error) {
	return templates.Settings{AmbiguousPolicy: mailtype.AmbiguousPolicy(p)}, nil
}

func key(orderID string) string { return fmt.Sprintf("order-confirmed:%s", orderID) }

// requireAttempts waits until the attempts counter of provider and outcome
// reads want: the recorder counts an attempt right after its commit, so a
// row's status may be visible a moment before the counter moves.
func requireAttempts(t *testing.T, m *sender.Metrics, provider, outcome string, want int) {
	t.Helper()
	require.Eventually(t, func() bool { return attempts(m, provider, outcome) == want }, 10*time.Second, 5*time.Millisecond,
		"mailsvc_send_attempts_total{provider=%q,outcome=%q} never reached %d (now %d)", provider, outcome, want, attempts(m, provider, outcome))
}

// countingStore counts the send-slot round trips of a real store.
type countingStore struct {
	sender.Store
	slots atomic.Int32
}

func (c *countingStore) TakeSendSlots(ctx context.Context, provider string, n int, interval time.Duration, probe bool) (store.Slots, error) {
	c.slots.Add(1)
	return c.Store.TakeSendSlots(ctx, provider, n, interval, probe)
}
