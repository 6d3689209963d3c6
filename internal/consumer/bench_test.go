package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// benchEvents is the number of events each run ingests.
const benchEvents = 20000

// BenchmarkIngest measures ingest throughput (events/s) from the real
// broker into the real database: 20,000 OrderConfirmed events published
// beforehand, then consumed until every one is acked. Each setting runs the
// raw baseline (consume, one multi-row insert per batch, one multiple ack;
// no validation, no rendering, no outcome per event) and the consumer in
// the same invocation, each on its own fresh queue and schema, and reports
// both rates and their ratio. Run it once per setting:
//
//	go test -run '^$' -bench Ingest -benchtime 1x ./internal/consumer/
func BenchmarkIngest(b *testing.B) {
	for _, s := range []struct{ prefetch, batch int }{{200, 100}, {400, 100}, {1000, 250}} {
		b.Run(fmt.Sprintf("prefetch=%d/batch=%d", s.prefetch, s.batch), func(b *testing.B) {
			var raw, ours float64
			for range b.N {
				raw += runBaseline(b, s.prefetch, s.batch)
				ours += runConsumer(b, s.prefetch, s.batch)
			}
			raw, ours = raw/float64(b.N), ours/float64(b.N)
			b.ReportMetric(raw, "baseline_events/s")
			b.ReportMetric(ours, "consumer_events/s")
			b.ReportMetric(ours/raw, "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchQueue declares a fresh topology and publishes benchEvents
// OrderConfirmed events to it (untimed).
func benchQueue(b *testing.B, prefetch, batch int) consumer.Config {
	b.Helper()
	names := brokertest.New(b)
	cfg := consumer.Config{
		URL: brokertest.URL(), InputExchange: names.InputExchange, Queue: names.Queue,
		BindingKeys:        []string{"order.confirmed"},
		DeadLetterExchange: names.DeadLetterExchange, DeadLetterQueue: names.DeadLetterQueue,
		DeclareTopology: true, Prefetch: prefetch, BatchSize: batch, MailFrom: "Shop <orders@shop.example>",
	}.WithDefaults()
	conn := brokertest.Dial(b)
	defer conn.Close()
	require.NoError(b, consumer.DeclareTopology(conn, cfg))
	pub, err := broker.NewPublisher(conn)
	require.NoError(b, err)
	defer pub.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for sent := 0; sent < benchEvents; {
		n := min(broker.MaxBatch, benchEvents-sent)
		msgs := make([]broker.Message, n)
		for i := range msgs {
			ev := confirmedEvent(fmt.Sprint(sent + i))
			ev["occurred_at"] = now
			msgs[i] = broker.Message{
				Exchange: cfg.InputExchange, RoutingKey: "order.confirmed", MessageID: ev["event_id"].(string),
				ContentType: "application/json", Body: body(b, ev), Persistent: true,
			}
		}
		for _, err := range pub.PublishBatch(context.Background(), msgs) {
			require.NoError(b, err)
		}
		sent += n
	}
	return cfg
}

// runConsumer starts a Consumer on a published queue and returns events/s
// from Start until every event was acked.
func runConsumer(b *testing.B, prefetch, batch int) float64 {
	return runConsumerWith(b, prefetch, batch, 0, nil)
}

func runConsumerWith(b *testing.B, prefetch, batch, inflight int, rend consumer.Renderer) float64 {
	b.Helper()
	cfg := benchQueue(b, prefetch, batch)
	cfg.MaxInFlight = inflight
	sc := storetest.New(b)
	tmpl, err := templates.New(templates.Options{})
	require.NoError(b, err)
	reg := prometheus.NewRegistry()
	if rend == nil {
		rend = tmpl
	}
	c, err := consumer.New(cfg, consumer.Options{
		Store: sc.Store, Templates: rend, Registerer: reg, Log: slog.New(slog.DiscardHandler),
	})
	require.NoError(b, err)
	r := &running{c: c, reg: reg}
	start := time.Now()
	require.NoError(b, c.Start(context.Background()))
	poll := time.NewTicker(2 * time.Millisecond) // the run takes seconds
	defer poll.Stop()
	for r.consumedTotal(b) < benchEvents {
		<-poll.C
	}
	elapsed := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(b, c.Stop(ctx))
	require.Equal(b, benchEvents, r.consumed(b, "OrderConfirmed", "inserted"))
	require.Equal(b, int64(benchEvents), sc.QueryInt(b, `SELECT count(*) FROM mail`))
	return benchEvents / elapsed.Seconds()
}

// runBaseline consumes a published queue the rawest way that still keeps
// the ack after the commit: batches collected like the consumer does, one
// multi-row INSERT (event_id and dedupe_key from the message id, the body
// as payload), one multiple ack. It returns events/s.
func runBaseline(b *testing.B, prefetch, batch int) float64 {
	b.Helper()
	cfg := benchQueue(b, prefetch, batch)
	sc := storetest.New(b)
	ctx := context.Background()
	start := time.Now()
	conn, err := broker.Dial(broker.Config{URL: cfg.URL, Name: "consumer-bench-raw"})
	require.NoError(b, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(b, err)
	require.NoError(b, ch.Qos(prefetch))
	in, err := ch.Consume(cfg.Queue, "", prefetch)
	require.NoError(b, err)
	for done := 0; done < benchEvents; {
		rows := []storetest.RawMail{}
		var last uint64
		for d := range in {
			rows = append(rows, storetest.RawMail{EventID: d.MessageID, DedupeKey: "raw:" + d.MessageID, Payload: d.Body})
			last = d.Tag
			if len(rows) == batch || len(in) == 0 {
				break
			}
		}
		require.NoError(b, storetest.InsertRaw(ctx, sc.Store, rows))
		require.NoError(b, ch.Ack(last, true))
		done += len(rows)
	}
	elapsed := time.Since(start)
	require.NoError(b, ch.Close())
	require.Equal(b, int64(benchEvents), sc.QueryInt(b, `SELECT count(*) FROM mail`))
	return benchEvents / elapsed.Seconds()
}

// BenchmarkIngestTrivialRender is a diagnostic beside BenchmarkIngest: the
// same runs with a renderer that does no work and returns a few bytes, to
// separate what the consumer's transport (batching, pipeline, validation,
// acks) costs from what rendering each mail and storing its content costs.
func BenchmarkIngestTrivialRender(b *testing.B) {
	var raw, ours float64
	for range b.N {
		raw += runBaseline(b, 1000, 250)
		ours += runConsumerWith(b, 1000, 250, 0, trivialRenderer{})
	}
	raw, ours = raw/float64(b.N), ours/float64(b.N)
	b.ReportMetric(raw, "baseline_events/s")
	b.ReportMetric(ours, "consumer_events/s")
	b.ReportMetric(ours/raw, "ratio")
	b.ReportMetric(0, "ns/op")
}

type trivialRenderer struct{}

func (trivialRenderer) Render(_, locale string, o templates.Order) (templates.Rendered, error) {
	return templates.Rendered{Locale: locale, Subject: "s", Text: "t", HTML: "h", ToAddress: o.Email}, nil
}

func (trivialRenderer) Settings(string) (templates.Settings, error) { return templates.Settings{}, nil }

// BenchmarkKeyScan prices the duplicate-key scan Decide runs on every
// event before decoding it (consumer.DuplicateKeyError), CPU only, no
// servers: decoding an OrderConfirmed as Decide does (the envelope, then
// its data) without and with the scan, and the whole Decide (which scans,
// decodes, checks and renders) for scale. It reports ns per event of each
// and the ratios scan+decode/decode and scan/Decide:
//
//	go test -run '^$' -bench KeyScan ./internal/consumer/
func BenchmarkKeyScan(b *testing.B) {
	reg, err := templates.New(templates.Options{})
	require.NoError(b, err)
	d := &consumer.Decider{MaxBytes: 1 << 20, MaxEventAge: 24 * time.Hour, FromDomain: "shop.example", Templates: reg}
	for _, items := range []int{1, 50} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			ev := confirmedNow("42")
			lines := make([]any, items)
			for i := range lines {
				lines[i] = map[string]any{"sku": fmt.Sprintf("SKU-%d", i), "name": "Áo thun", "quantity": 1, "unit_price": "625000"}
			}
			data(ev)["items"] = lines
			data(ev)["total"] = fmt.Sprint(625000 * items)
			msg := body(b, ev)
			dup, err := consumer.FindDuplicateKeyForTest(msg)
			require.NoError(b, err)
			require.Nil(b, dup)
			require.NoError(b, consumer.DecodeForTest(msg))
			require.Equal(b, consumer.ActionRecord, d.Decide(consumer.Message{Body: msg}).Action)

			perEvent := func(f func()) float64 {
				start := time.Now()
				for range b.N {
					f()
				}
				return float64(time.Since(start).Nanoseconds()) / float64(b.N)
			}
			decode := perEvent(func() { _ = consumer.DecodeForTest(msg) })
			scanned := perEvent(func() {
				_, _ = consumer.FindDuplicateKeyForTest(msg)
				_ = consumer.DecodeForTest(msg)
			})
			scan := perEvent(func() { _, _ = consumer.FindDuplicateKeyForTest(msg) })
			decide := perEvent(func() { _ = d.Decide(consumer.Message{Body: msg}) })
			b.ReportMetric(float64(len(msg)), "bytes/event")
			b.ReportMetric(decode, "ns/decode")
			b.ReportMetric(scanned, "ns/scan+decode")
			b.ReportMetric(scanned/decode, "ratio")
			b.ReportMetric(decide, "ns/decide")
			b.ReportMetric(scan/decide, "scan/decide")
			b.ReportMetric(0, "ns/op")
		})
	}
}
