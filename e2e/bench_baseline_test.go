package e2e

// The raw baseline of BenchmarkEndToEnd: the least work that still takes an
// event from the broker to an SMTP server through PostgreSQL, built here in
// the test program. It is a yardstick, not a design: it validates nothing,
// renders no template (a one-line subject and body, plus set.padBytes of
// filler in each body when set), writes no feedback
// event and publishes nothing. SQL in test code is acceptable here for that
// reason only; mailsvc's own SQL lives in internal/store.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Baseline statements, on the mail table of the migrated test schema (the
// same table and indexes mailsvc writes).
const (
	// rawInsertSQL: one multi-row INSERT per batch of deliveries.
	rawInsertSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, to_email, payload, subject, body_text, body_html, status)
SELECT e, k, o, 'raw', t, p::jsonb, s, x, h, 'pending'
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
    AS u(e, k, o, t, p, s, x, h)`
	// rawClaimSQL: a simple UPDATE ... RETURNING over due pending rows. The
	// ids are an array, not `id IN (SELECT ...)`: that form was planned as
	// a hash semi-join over a sequential scan of the table and made this
	// baseline 4x slower than mailsvc (internal/store/claim.go says the same
	// of a join).
	rawClaimSQL = `
UPDATE mail SET status = 'sending', attempts = attempts + 1, locked_until = now() + interval '1 minute',
    locked_by = 'raw', updated_at = now()
WHERE id = ANY (ARRAY(SELECT id FROM mail WHERE status = 'pending' AND NOT cancel_requested AND send_after <= now()
                      ORDER BY send_after, id LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING id, dedupe_key, to_email, subject, body_text, body_html`
	// rawMarkSQL: one UPDATE per claimed batch once its mails were sent.
	rawMarkSQL = `UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY($1)`
)

// rawEvent is the part of an event the baseline reads.
type rawEvent struct {
	EventID   string `json:"event_id"`
	DedupeKey string `json:"dedupe_key"`
	Data      struct {
		OrderID string `json:"order_id"`
		Email   string `json:"email"`
	} `json:"data"`
}

// rawRow is a claimed row.
type rawRow struct {
	id                           int64
	key, to, subject, text, html string
}

// rawPipeline is the running baseline: one ingest loop (consume, insert,
// multiple ack after the commit) and set.workers send loops (claim, send
// on their own go-mail connection, mark), woken by the ingest loop.
type rawPipeline struct {
	b      *testing.B
	set    benchSettings
	pool   *pgxpool.Pool
	srv    *smtptest.Server
	wake   []chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startBaseline declares a quorum queue bound to a fresh input exchange
// and starts the raw pipeline on a fresh schema.
func startBaseline(b *testing.B, set benchSettings, discard bool) *system {
	srv := smtptest.New(b, smtptest.Options{Discard: discard})
	sc := storetest.New(b)
	names := brokertest.New(b)
	conn := brokertest.DialRaw(b)
	ch, err := conn.Channel()
	require.NoError(b, err)
	require.NoError(b, ch.ExchangeDeclare(names.InputExchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(names.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(b, err)
	require.NoError(b, ch.QueueBind(names.Queue, "order.confirmed", names.InputExchange, false, nil))
	require.NoError(b, ch.Qos(set.prefetch, 0, false))
	deliveries, err := ch.Consume(names.Queue, "", false, false, false, false, nil)
	require.NoError(b, err)

	ctx, cancel := context.WithCancel(context.Background())
	pcfg, err := pgxpool.ParseConfig(sc.URL)
	require.NoError(b, err)
	pcfg.MaxConns = int32(set.workers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(b, err)
	r := &rawPipeline{b: b, set: set, pool: pool, srv: srv, cancel: cancel}
	for range set.workers {
		w := make(chan struct{}, 1)
		r.wake = append(r.wake, w)
		r.wg.Go(func() { r.sendLoop(ctx, w) })
	}
	// amqp091's deliveries channel is unbuffered: a buffered copy lets the
	// ingest loop see what already arrived and batch it.
	in := make(chan amqp.Delivery, set.prefetch)
	r.wg.Go(func() {
		defer close(in)
		for d := range deliveries {
			in <- d
		}
	})
	r.wg.Go(func() { r.ingest(ctx, ch, in) })
	return &system{names: names, smtp: srv,
		settle: func(b *testing.B, n int) {
			require.Eventually(b, func() bool {
				return sc.QueryInt(b, `SELECT count(*) FROM mail WHERE status = 'sent'`) == int64(n)
			}, time.Minute, 10*time.Millisecond, "baseline rows sent")
			require.Equal(b, n, srv.Count(), "SMTP deliveries")
		},
		stop: func(*testing.B) {
			cancel()
			_ = ch.Close() // ends the deliveries channel
			r.wg.Wait()
			pool.Close()
			_ = conn.Close()
		},
	}
}

// ingest takes a delivery, adds whatever else is already buffered up to
// set.ingestBatch, inserts them in one statement and acks them all.
func (r *rawPipeline) ingest(ctx context.Context, ch *amqp.Channel, in <-chan amqp.Delivery) {
	for d := range in {
		batch := []amqp.Delivery{d}
	fill:
		for len(batch) < r.set.ingestBatch {
			select {
			case d, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, d)
			default:
				break fill
			}
		}
		if err := r.insert(ctx, batch); err != nil {
			if ctx.Err() == nil {
				r.b.Error(err)
			}
			return
		}
		if err := ch.Ack(batch[len(batch)-1].DeliveryTag, true); err != nil {
			r.b.Error(err)
			return
		}
		for _, w := range r.wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

func (r *rawPipeline) insert(ctx context.Context, batch []amqp.Delivery) error {
	cols := make([][]string, 8)
	filler := rawFiller(r.set.padBytes)
	for _, d := range batch {
		var ev rawEvent
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		subject := "Order " + ev.Data.OrderID + " confirmed"
		row := []string{ev.EventID, ev.DedupeKey, ev.Data.OrderID, ev.Data.Email, string(d.Body), subject,
			subject + "\n" + filler, "<p>" + subject + "</p><p>" + filler + "</p>"}
		for i, v := range row {
			cols[i] = append(cols[i], v)
		}
	}
	if _, err := r.pool.Exec(ctx, rawInsertSQL, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7]); err != nil {
		return fmt.Errorf("insert raw mails: %w", err)
	}
	return nil
}

// sendLoop claims up to set.sendBatch rows, sends them on one go-mail
// connection and marks them sent; with nothing due it waits for a wake-up
// or set.poll.
func (r *rawPipeline) sendLoop(ctx context.Context, wake <-chan struct{}) {
	c, err := gomail.NewClient(r.srv.Host, gomail.WithPort(r.srv.Port), gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithHELO("bench.local"))
	if err == nil {
		err = c.DialWithContext(ctx)
	}
	if err != nil {
		r.b.Error(err)
		return
	}
	defer func() { _ = c.Close() }()
	for ctx.Err() == nil {
		rows, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.b.Error(err)
			}
			return
		}
		if len(rows) == 0 {
			select {
			case <-ctx.Done():
			case <-wake:
			case <-time.After(r.set.poll):
			}
			continue
		}
		if err := r.sendAndMark(ctx, c, rows); err != nil {
			if ctx.Err() == nil {
				r.b.Error(err)
			}
			return
		}
	}
}

func (r *rawPipeline) claim(ctx context.Context) ([]rawRow, error) {
	rs, err := r.pool.Query(ctx, rawClaimSQL, r.set.sendBatch)
	if err != nil {
		return nil, fmt.Errorf("claim raw mails: %w", err)
	}
	defer rs.Close()
	var rows []rawRow
	for rs.Next() {
		var w rawRow
		if err := rs.Scan(&w.id, &w.key, &w.to, &w.subject, &w.text, &w.html); err != nil {
			return nil, fmt.Errorf("scan raw mail: %w", err)
		}
		rows = append(rows, w)
	}
	return rows, rs.Err()
}

func (r *rawPipeline) sendAndMark(ctx context.Context, c *gomail.Client, rows []rawRow) error {
	ids := make([]int64, len(rows))
	for i, w := range rows {
		m, err := rawMessage(w)
		if err != nil {
			return err
		}
		if err := c.Send(m); err != nil {
			return fmt.Errorf("send raw mail %s: %w", w.key, err)
		}
		ids[i] = w.id
	}
	if _, err := r.pool.Exec(ctx, rawMarkSQL, ids); err != nil {
		return fmt.Errorf("mark raw mails sent: %w", err)
	}
	return nil
}

// rawMessage builds a small multipart/alternative message with the
// headers the latency run matches on.
func rawMessage(w rawRow) (*gomail.Msg, error) {
	m := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := m.From("orders@shop.example"); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if err := m.To(w.to); err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	m.Subject(w.subject)
	m.SetMessageIDWithValue(w.key + "@shop.example")
	m.SetDateWithValue(time.Now().UTC())
	m.SetGenHeader("X-Dedupe-Key", w.key)
	m.SetBodyString(gomail.TypeTextPlain, w.text)
	m.AddAlternativeString(gomail.TypeTextHTML, w.html)
	return m, nil
}

// rawFiller is about n bytes of Vietnamese text (quoted-printable makes it
// about 2.5 times larger on the wire, as it does mailsvc's content).
func rawFiller(n int) string {
	const line = "Cảm ơn quý khách đã mua hàng tại cửa hàng của chúng tôi.\n"
	return strings.Repeat(line, n/len(line))
}
