package bench

// The floor baseline (floorSettings, set.render and set.feedback): the job
// mailsvc does, with nothing beyond what its promise and its contract ask,
// done the plainest way, so that mailsvc can be measured against a
// yardstick that does the same job. It is a yardstick, not a design, and
// not a proven lower bound (a relay that reads a cursor over the mail rows
// instead of a queue table, for one, might do the same for less).
//
// It is the recorded-log baseline (recorded_test.go: each send marked
// started, and each outcome recorded before the worker's next send, in a
// narrow log; the mail rows marked sent per claimed batch) with mailsvc's
// own mails (set.render: each rendered from its event by internal/templates,
// as mailsvc's consumer renders it, so that content, size and compression
// are the same) and one EmailSent feedback event per mail: the statement
// that marks a batch sent also queues the batch's events in a narrow table
// (a transactional outbox: an event exists if and only if its mail is
// recorded sent; UUIDv7 event ids made in Go, as the contract asks), and a
// relay loop publishes them to the events exchange, persistent and
// mandatory, with publisher confirms, and drops them from the queue once
// the broker acked them. Its SMTP client skips go-mail's NOOP and RSET
// around each mail, as a careful plain client would (the other baselines
// keep go-mail's defaults; mailsvc pipelines its commands, two round trips
// a mail).
//
// It still skips what mailsvc does beyond that: validation, duplicate
// events (ON CONFLICT), fencing tokens, leases, cancels, retries,
// dead-lettering, the relay's per-order ordering and its lease, broker
// returns (it publishes mandatory but never reads a return), the operators'
// views of published events, tracing and metrics. Its provider_message_id
// is a constant, not the SMTP server's reply, and its attempts count claims.
// A mail's event is written when its batch is marked sent, up to a batch
// after the mail was accepted.

import (
	"context"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Statements of the floor baseline, on the mail table of the migrated test
// schema (the table and indexes mailsvc writes) and on a narrow event queue
// of its own.
const (
	// rawEventDDL is the queue of owed feedback events: written with the
	// sent mark of their mails, deleted once the broker confirmed them. A
	// primary key is its only index; mailsvc's outbox also keeps published
	// rows for operators and indexes them by order, by mail and by state,
	// which the floor does not need.
	rawEventDDL = `CREATE TABLE IF NOT EXISTS floor_event (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL, payload text NOT NULL)`
	// rawMarkEventsSQL marks the rows of $1 sent and queues one EmailSent
	// per row, with the event id $2[i] (UUIDv7, made in Go as the contract
	// asks), in one statement and so one commit. The payload is mailsvc's
	// EmailSent envelope (about 410 bytes of JSON text).
	rawMarkEventsSQL = `
WITH m AS (
    UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY ($1)
    RETURNING id, event_id, dedupe_key, order_id, revision, attempts)
INSERT INTO floor_event (event_id, payload)
SELECT e.eid, json_build_object(
    'event_id', e.eid, 'event_type', 'EmailSent', 'version', 1, 'occurred_at', now(), 'dedupe_key', m.dedupe_key,
    'data', json_build_object('order_id', m.order_id, 'revision', m.revision, 'template', 'order_confirmed',
        'status', 'sent', 'attempts', m.attempts, 'provider', 'smtp', 'provider_message_id', '2.0.0 OK: queued',
        'source_event_id', m.event_id))::text
FROM m JOIN unnest($1::bigint[], $2::uuid[]) AS e(id, eid) ON e.id = m.id
ORDER BY m.id`
	// rawUnpublishedSQL: the relay's round, oldest first.
	rawUnpublishedSQL = `SELECT id, event_id::text, payload FROM floor_event ORDER BY id LIMIT $1`
	// rawPublishedSQL drops a round's rows once the broker confirmed them
	// all. The relay's connection commits it without waiting for the WAL
	// flush: a delete lost in a crash only publishes the events again,
	// with the same event ids, which at-least-once delivery allows.
	rawPublishedSQL = `DELETE FROM floor_event WHERE id = ANY ($1)`
)

// rawRelayBatch is the most events one relay round publishes.
const rawRelayBatch = 100

// rawEventRow is a queued event as the relay reads it.
type rawEventRow struct {
	id      int64
	eventID string
	payload []byte
}

// markSent marks a claimed batch's rows sent in one statement; with
// set.feedback the same statement queues their EmailSent events, and the
// relay is woken once it committed.
func (r *rawPipeline) markSent(ctx context.Context, ids []int64) error {
	if !r.set.feedback {
		if _, err := r.pool.Exec(ctx, rawMarkSQL, ids); err != nil {
			return fmt.Errorf("mark raw mails sent: %w", err)
		}
		return nil
	}
	eventIDs := make([]string, len(ids))
	for i := range ids {
		eventIDs[i] = uuid.Must(uuid.NewV7()).String()
	}
	if _, err := r.pool.Exec(ctx, rawMarkEventsSQL, ids, eventIDs); err != nil {
		return fmt.Errorf("mark raw mails sent with their events: %w", err)
	}
	select {
	case r.relayWake <- struct{}{}:
	default:
	}
	return nil
}

// startRelay creates the event queue, opens the relay's own database
// connection (synchronous_commit off: see rawPublishedSQL) and its broker
// channel, in confirm mode, and starts the relay loop. The events exchange
// is the parent's to declare.
func (r *rawPipeline) startRelay(ctx context.Context, dbURL string) error {
	if _, err := r.pool.Exec(ctx, rawEventDDL); err != nil {
		return fmt.Errorf("event queue table: %w", err)
	}
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("relay database URL: %w", err)
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	db, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("relay database: %w", err)
	}
	ch, err := r.conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = db.Close(ctx)
		return fmt.Errorf("relay channel in confirm mode: %w", err)
	}
	r.relayWake = make(chan struct{}, 1)
	r.wg.Go(func() {
		defer func() { _ = db.Close(context.WithoutCancel(ctx)) }()
		r.relayLoop(ctx, db, ch)
	})
	return nil
}

// relayLoop publishes the queued events in rounds (relayRound): again at
// once after a full round, else after a batch's mark committed or
// set.poll.
func (r *rawPipeline) relayLoop(ctx context.Context, db *pgx.Conn, ch *amqp.Channel) {
	for ctx.Err() == nil {
		n, err := r.relayRound(ctx, db, ch)
		if err != nil {
			r.fail(ctx, err)
			return
		}
		if n == rawRelayBatch {
			continue
		}
		select {
		case <-ctx.Done():
		case <-r.relayWake:
		case <-time.After(r.set.poll):
		}
	}
}

// relayRound publishes up to rawRelayBatch queued events to the events
// exchange (persistent, mandatory, as the contract asks), waits until the
// broker acked every one (a nack is an error) and drops them from the
// queue. It returns how many events it published.
func (r *rawPipeline) relayRound(ctx context.Context, db *pgx.Conn, ch *amqp.Channel) (int, error) {
	rows, err := queuedEvents(ctx, db)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	confs := make([]*amqp.DeferredConfirmation, len(rows))
	ids := make([]int64, len(rows))
	now := time.Now()
	for i, w := range rows {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, r.eventsExchange, "email.sent", true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: w.eventID, Type: "EmailSent",
			Timestamp: now, Body: w.payload,
		})
		if err != nil {
			return 0, fmt.Errorf("publish event row %d: %w", w.id, err)
		}
		confs[i], ids[i] = c, w.id
	}
	for i, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return 0, fmt.Errorf("confirm of event row %d: %w", ids[i], err)
		}
		if !ok {
			return 0, fmt.Errorf("the broker nacked event row %d", ids[i])
		}
	}
	if _, err := db.Exec(ctx, rawPublishedSQL, ids); err != nil {
		return 0, fmt.Errorf("drop %d published events: %w", len(ids), err)
	}
	return len(rows), nil
}

// queuedEvents reads up to rawRelayBatch queued events, oldest first.
func queuedEvents(ctx context.Context, db *pgx.Conn) ([]rawEventRow, error) {
	rs, err := db.Query(ctx, rawUnpublishedSQL, rawRelayBatch)
	if err != nil {
		return nil, fmt.Errorf("read event queue: %w", err)
	}
	defer rs.Close()
	var rows []rawEventRow
	for rs.Next() {
		var w rawEventRow
		if err := rs.Scan(&w.id, &w.eventID, &w.payload); err != nil {
			return nil, fmt.Errorf("scan event row: %w", err)
		}
		rows = append(rows, w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read event queue: %w", err)
	}
	return rows, nil
}

// floorEvents counts the EmailSent events the floor baseline publishes, on
// a queue bound to the events exchange as the mailsvc stack binds its own
// (e2etest.NewFeedbackQueue), and checks the first against the contract. The test
// process reads them, so their consuming is not measured.
type floorEvents struct {
	sent atomic.Int64
	mu   sync.Mutex
	// checked is set once the first EmailSent was checked; reasons are its
	// breaches of the contract (api.ValidateFeedbackMessage).
	checked bool
	reasons []string
}

// newFloorEvents declares the events exchange and the observing queue
// (before the baseline starts, so that no event is unroutable) and counts
// the email.sent deliveries until the test's cleanup closes the queue's
// connection.
func newFloorEvents(b *testing.B, names *brokertest.Names) *floorEvents {
	fb := e2etest.NewFeedbackQueue(b, names)
	e := &floorEvents{}
	go func() {
		for d := range fb.Out {
			if d.RoutingKey == "email.sent" {
				e.check(d) // before the count, so that settle sees it done
				e.sent.Add(1)
			}
		}
	}()
	return e
}

// check validates d against the contract if it is the first event.
func (e *floorEvents) check(d amqp.Delivery) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.checked {
		return
	}
	e.checked = true
	e.reasons = api.ValidateFeedbackMessage(api.Message{RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
		ContentType: d.ContentType, Persistent: d.DeliveryMode == amqp.Persistent, Body: d.Body})
}

// settle waits until n EmailSent events arrived and the event queue is
// empty (the relay drops a round after the broker's acks, so possibly
// after the events arrived), then requires exactly n events, every mail
// sent, and the first event within the contract.
func (e *floorEvents) settle(b *testing.B, sc *storetest.Schema, n int) {
	within := time.Minute + time.Duration(n)*time.Millisecond
	require.Eventually(b, func() bool { return e.sent.Load() >= int64(n) }, within, 10*time.Millisecond,
		"EmailSent events, want %d", n)
	require.Eventually(b, func() bool {
		return sc.QueryInt(b, `SELECT count(*) FROM floor_event`) == 0
	}, time.Minute, 10*time.Millisecond, "events left in the queue")
	require.Equal(b, int64(n), e.sent.Load(), "EmailSent events")
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Empty(b, e.reasons, "the floor's first EmailSent breaks the contract (api/asyncapi.yaml)")
}
