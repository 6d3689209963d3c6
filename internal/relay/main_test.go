package relay_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

// bundle is one test's servers, stores and relay configuration.
type bundle struct {
	sc    *storetest.Schema
	names *brokertest.Names
	// writer writes outbox rows addressed to the test's events exchange and
	// reads them back; it always connects directly.
	writer *store.Store
	// relayStore is what the relay uses: through dbProxy when there is one.
	relayStore *store.Store
	dbProxy    *testproxy.Proxy
	dbLink     *testproxy.Hole
	amqpProxy  *testproxy.Proxy
	reg        *prometheus.Registry
	m          *relay.Metrics
	bm         *broker.Metrics
	cfg        relay.Config
}

type setupOpts struct {
	dbProxy, amqpProxy bool
	// vanishingDB puts the relay's database behind a testproxy.Hole.
	vanishingDB bool
	// txPool puts the relay's database behind a testproxy.TxPool of that
	// many server connections (pgx in exec mode, as behind PgBouncer).
	txPool int
}

func setup(t testing.TB, o setupOpts) *bundle {
	t.Helper()
	b := &bundle{sc: storetest.New(t), names: brokertest.New(t), reg: prometheus.NewRegistry()}
	dbURL, amqpURL := b.sc.URL, brokertest.URL()
	if o.dbProxy {
		b.dbProxy = testproxy.New(t, testproxy.HostPort(t, b.sc.URL, "5432"))
		dbURL = b.dbProxy.RewriteURL(t, b.sc.URL)
	}
	if o.vanishingDB {
		b.dbLink = testproxy.NewHole(t, testproxy.HostPort(t, b.sc.URL, "5432"))
		dbURL = b.dbLink.RewriteURL(t, b.sc.URL)
	}
	if o.txPool > 0 {
		dbURL = testproxy.NewTxPool(t, testproxy.HostPort(t, b.sc.URL, "5432"), o.txPool).RewriteURL(t, b.sc.URL) +
			"&default_query_exec_mode=exec"
	}
	if o.amqpProxy {
		b.amqpProxy = testproxy.New(t, testproxy.HostPort(t, amqpURL, "5672"))
		amqpURL = b.amqpProxy.RewriteURL(t, amqpURL)
	}
	b.writer = openStore(t, b.sc.URL, b.names.EventsExchange)
	b.relayStore = openStore(t, dbURL, b.names.EventsExchange)
	b.m, b.bm = relay.NewMetrics(b.reg), broker.NewMetrics(b.reg)
	b.cfg = testConfig(amqpURL, b.names.EventsExchange)
	return b
}

// testConfig is fast enough for tests: short polls, backoffs and lease
// periods (a leader that vanishes is replaced within about 3 s).
func testConfig(amqpURL, exchange string) relay.Config {
	return relay.Config{
		AMQP:     broker.Config{URL: amqpURL, Name: "mailsvc-relay-test", Backoff: 50 * time.Millisecond, BackoffMax: 300 * time.Millisecond},
		Exchange: exchange, DeclareExchange: true,
		BatchSize: 50, PollInterval: 200 * time.Millisecond, ConfirmTimeout: 5 * time.Second, MaxAttempts: 3,
		RetryBackoff: 20 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond, UnroutableBackoffMax: 100 * time.Millisecond,
		Lease: 3 * time.Second, LeaseRenew: time.Second, LeaseRetry: 100 * time.Millisecond,
		BrokerStepDown: 400 * time.Millisecond, ReconnectBackoff: 50 * time.Millisecond, ReconnectBackoffMax: 300 * time.Millisecond,
	}
}

func openStore(t testing.TB, url, exchange string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: url, MaxConns: 4, EventsExchange: exchange})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// newRelay builds a relay on the bundle's config (after edit, if given)
// and stops it when the test ends.
func (b *bundle) newRelay(t testing.TB, edit func(*relay.Config)) *relay.Relay {
	t.Helper()
	cfg := b.cfg
	if edit != nil {
		edit(&cfg)
	}
	r, err := relay.New(cfg, b.relayStore, testLogger(t), b.m, b.bm)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

func (b *bundle) start(t testing.TB, r *relay.Relay) {
	t.Helper()
	require.NoError(t, r.Start(context.Background()))
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// tWriter sends log lines to t.Log, so they show only for failed tests.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func feedback(orderID string, typ mailtype.EventType) store.Feedback {
	return store.Feedback{
		Type: typ, DedupeKey: mailtype.ConfirmationKey(orderID), OrderID: orderID, Template: "order_confirmed",
		Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp", ProviderMessageID: "pm-" + orderID,
	}
}

func (b *bundle) insert(t testing.TB, fs ...store.Feedback) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, storetest.InsertOutbox(ctx, b.writer, fs...))
}

func (b *bundle) outbox(t testing.TB) []storetest.OutboxState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := storetest.Outbox(ctx, b.writer)
	require.NoError(t, err)
	return rows
}

// countPublished counts published rows.
func (b *bundle) countPublished(t testing.TB) int {
	t.Helper()
	n := 0
	for _, r := range b.outbox(t) {
		if r.PublishedAt != nil {
			n++
		}
	}
	return n
}

func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// histogram returns the sample count and sum of a histogram.
func histogram(t testing.TB, h prometheus.Histogram) (count uint64, sum float64) {
	t.Helper()
	var d dto.Metric
	require.NoError(t, h.Write(&d))
	return d.Histogram.GetSampleCount(), d.Histogram.GetSampleSum()
}

func (b *bundle) failures(t testing.TB, reason mailtype.Reason) float64 {
	return value(t, b.m.Failures.WithLabelValues(string(reason)))
}
