package consumer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

const waitFor, tick = 30 * time.Second, 10 * time.Millisecond

// bundle is one test's servers: its own schema, its own exchange and queue
// names, a publisher of its own, and the consumers it starts.
type bundle struct {
	ctx   context.Context
	sc    *storetest.Schema
	names *brokertest.Names
	cfg   consumer.Config
	// store is what the next consumer records into (sc.Store unless a
	// test puts a proxy in between).
	store *store.Store
	tmpl  *templates.Registry
	conn  *broker.Conn
	pub   *broker.Publisher
	// logs keeps what every consumer of the test logged at warn or above.
	logs *logRecorder
	// tracer is the next consumer's tracer (nil: tracing off).
	tracer *tracing.Tracer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	sc := storetest.New(t)
	names := brokertest.New(t)
	tmpl, err := templates.New(templates.Options{})
	require.NoError(t, err)
	conn := brokertest.Dial(t)
	t.Cleanup(func() { conn.Close() })
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	return &bundle{
		ctx: ctx, sc: sc, names: names, store: sc.Store, tmpl: tmpl, conn: conn, pub: pub,
		logs: newLogRecorder(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		cfg: consumer.Config{
			URL: brokertest.URL(), ConnectionName: "mailsvc-consumer-test",
			InputExchange: names.InputExchange, Queue: names.Queue,
			BindingKeys:        []string{"order.confirmed", "order.cancelled"},
			DeadLetterExchange: names.DeadLetterExchange, DeadLetterQueue: names.DeadLetterQueue,
			DeclareTopology: true, Prefetch: 50, BatchSize: 20, DeliveryLimit: 20, MaxMessageBytes: 4096,
			MailFrom:         "Shop <orders@shop.example>",
			ReconnectBackoff: 20 * time.Millisecond, ReconnectBackoffMax: 200 * time.Millisecond,
			RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			StatementTimeout: 5 * time.Second, ConfirmTimeout: 5 * time.Second,
		},
	}
}

// running is one started consumer and its metrics.
type running struct {
	c   *consumer.Consumer
	reg *prometheus.Registry
}

// start starts a consumer with b.cfg and b.store, waits until it consumes,
// and stops it (gracefully, within 10 s) when the test ends.
func (b *bundle) start(t *testing.T) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := consumer.New(b.cfg, consumer.Options{
		Store: b.store, Templates: b.tmpl, Registerer: reg, BrokerMetrics: broker.NewMetrics(reg),
		Log: slog.New(b.logs), Tracer: b.tracer,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	require.Eventually(t, func() bool { return c.Ready(b.ctx) == nil }, waitFor, tick, "consumer ready")
	return &running{c: c, reg: reg}
}

// publish publishes bodies with routing key rk and waits for every
// confirm; message_id is the body's event_id when it has one.
func (b *bundle) publish(t *testing.T, rk string, bodies ...[]byte) {
	t.Helper()
	for len(bodies) > 0 {
		n := min(len(bodies), broker.MaxBatch)
		msgs := make([]broker.Message, n)
		for i, body := range bodies[:n] {
			var ev struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal(body, &ev)
			msgs[i] = broker.Message{
				Exchange: b.names.InputExchange, RoutingKey: rk, MessageID: ev.EventID,
				ContentType: "application/json", Body: body, Persistent: true, Mandatory: true,
			}
		}
		for i, err := range b.pub.PublishBatch(b.ctx, msgs) {
			require.NoError(t, err, "publish %d", i)
		}
		bodies = bodies[n:]
	}
}

// queueDepth is the number of ready messages in queue.
func (b *bundle) queueDepth(t *testing.T, queue string) int {
	t.Helper()
	return brokertest.Depth(t, queue)
}

// deadLetters takes every message from the dead-letter queue.
func (b *bundle) deadLetters(t *testing.T) []broker.Delivery {
	t.Helper()
	return brokertest.Drain(t, b.names.DeadLetterQueue)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	return int(b.sc.QueryInt(t, sql, args...))
}

// metric returns the value of the counter or gauge name with labels.
func (r *running) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// consumed is mailsvc_events_consumed_total{event_type, outcome}.
func (r *running) consumed(t testing.TB, eventType, outcome string) int {
	t.Helper()
	return int(r.metric(t, "mailsvc_events_consumed_total", "event_type", eventType, "outcome", outcome))
}

// consumedTotal sums mailsvc_events_consumed_total over all labels.
func (r *running) consumedTotal(t testing.TB) int {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "mailsvc_events_consumed_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int(total)
}

func (r *running) waitConsumed(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return r.consumedTotal(t) >= n }, waitFor, tick, "%d events consumed", n)
	require.Equal(t, n, r.consumedTotal(t))
}

// proxiedStore opens a store on the test schema through a TCP proxy the
// test can cut; it closes when the test ends.
func (b *bundle) proxiedStore(t *testing.T) *testproxy.Proxy {
	t.Helper()
	px := testproxy.New(t, testproxy.HostPort(t, storetest.URL(), "5432"))
	st, err := store.Open(b.ctx, store.Options{URL: px.RewriteURL(t, b.sc.URL), MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	b.store = st
	return px
}

// confirmedAt and cancelledAt are events occurring now.
func confirmedNow(orderID string) map[string]any {
	ev := confirmedEvent(orderID)
	ev["occurred_at"] = time.Now().UTC().Format(time.RFC3339Nano)
	return ev
}

func cancelledNow(orderID string) map[string]any {
	ev := cancelledEvent(orderID)
	ev["occurred_at"] = time.Now().UTC().Format(time.RFC3339Nano)
	return ev
}
