package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
)

// benchRows is the number of rows (or messages) one benchmark iteration moves.
const benchRows = 20000

// BenchmarkRelay measures rows/s relayed from the outbox to the broker with
// publisher confirms (relay), next to a raw baseline that publishes the same
// number of messages of the same size in batches of the same size with
// deferred confirms and no database (raw). Both publish persistent,
// mandatory messages routed to one durable queue. Run it with
// `go test -run '^$' -bench BenchmarkRelay -benchtime 1x ./internal/relay`.
func BenchmarkRelay(b *testing.B) {
	bd := setup(b, setupOpts{})
	queue := bindDurable(b, bd.names)
	batch := relay.Config{}.WithDefaults().BatchSize
	var raw, relayed float64
	b.Run("raw", func(b *testing.B) { raw = benchRaw(b, bd, queue, batch) })
	b.Run("relay", func(b *testing.B) { relayed = benchRelay(b, bd, queue) })
	if raw > 0 {
		b.Logf("%d rows, batch %d: raw %.0f msg/s, relay %.0f rows/s, relay/raw = %.2f", benchRows, batch, raw, relayed, relayed/raw)
	}
}

// bindDurable declares a durable queue bound to the events exchange with
// "#", deleted with the test's names (it is names.EventsQueue), and
// returns a function that purges it.
func bindDurable(b *testing.B, names *brokertest.Names) func() {
	brokertest.DeclareExchange(b, names.EventsExchange)
	brokertest.DeclareQueue(b, names.EventsQueue, names.EventsExchange, "#", nil)
	return func() { brokertest.PurgeQueue(b, names.EventsQueue) }
}

func benchRaw(b *testing.B, bd *bundle, purge func(), batch int) float64 {
	conn, err := broker.Dial(broker.Config{URL: brokertest.URL(), Name: "relay-bench-raw"})
	require.NoError(b, err)
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	require.NoError(b, err)
	defer pub.Close()
	body, err := json.Marshal(map[string]any{"event_id": "0199a1f0-0000-7000-8000-000000000042", "event_type": "EmailSent",
		"version": 1, "occurred_at": time.Now(), "dedupe_key": "order-confirmed:o1",
		"data": feedback("o1", mailtype.EmailSent)})
	require.NoError(b, err)
	msgs := make([]broker.Message, benchRows)
	for i := range msgs {
		msgs[i] = broker.Message{Exchange: bd.names.EventsExchange, RoutingKey: "email.sent", MessageID: fmt.Sprintf("raw-%d", i),
			Type: "EmailSent", ContentType: "application/json", Timestamp: time.Now(), Body: body, Mandatory: true, Persistent: true}
	}
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		purge()
		began := time.Now()
		for lo := 0; lo < len(msgs); lo += batch {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, err := range pub.PublishBatch(ctx, msgs[lo:min(lo+batch, len(msgs))]) {
				require.NoError(b, err)
			}
			cancel()
		}
		elapsed += time.Since(began)
	}
	return report(b, elapsed)
}

func benchRelay(b *testing.B, bd *bundle, purge func()) float64 {
	r := bd.newRelay(b, func(c *relay.Config) { *c = relay.Config{AMQP: c.AMQP, Exchange: c.Exchange} })
	bd.start(b, r)
	require.Eventually(b, func() bool { return value(b, bd.m.Leader) == 1 }, 30*time.Second, 5*time.Millisecond)
	published := bd.m.Published.WithLabelValues(string(mailtype.EmailSent))
	fs := make([]store.Feedback, benchRows)
	for i := range fs {
		fs[i] = feedback(fmt.Sprintf("o%d", i), mailtype.EmailSent)
	}
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		purge()
		want := value(b, published) + benchRows
		b.StopTimer()
		bd.insert(b, fs...) // the commit wakes the relay (NOTIFY)
		began := time.Now()
		b.StartTimer()
		waitCounter(b, func() float64 { return value(b, published) }, want)
		elapsed += time.Since(began)
	}
	return report(b, elapsed)
}

// waitCounter polls an in-memory counter every millisecond until it
// reaches want (the database is left alone while the relay works).
func waitCounter(b *testing.B, get func() float64, want float64) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Minute)
	for get() < want {
		select {
		case <-tick.C:
		case <-deadline:
			b.Fatalf("relayed %.0f of %.0f rows in 5 minutes", get(), want)
		}
	}
}

func report(b *testing.B, elapsed time.Duration) float64 {
	rate := float64(benchRows*b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(0, "ns/op")
	return rate
}
