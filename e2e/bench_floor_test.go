package e2e

// The floor baseline (floorSettings, set.render and set.feedback): the job
// mailsvc does, with nothing beyond what its promise and its contract ask,
// done the plainest way, so that mailsvc can be measured against a
// yardstick that does the same job. It is a yardstick, not a design, and
// not a proven lower bound: a relay that reads a cursor over the mail rows
// instead of an outbox table, for one, might do the same for less.
//
// It is the recorded-log baseline (bench_recorded_test.go: each send marked
// started, and each outcome recorded before the worker's next send, in a
// narrow log; the mail rows marked sent per claimed batch) with mailsvc's
// own mails (set.render: each rendered from its event by internal/templates,
// as mailsvc's consumer renders it, so that content, size and compression
// are the same) and one EmailSent feedback event per mail: the statement
// that marks a batch sent also inserts the batch's events into mailsvc's
// own outbox table (a transactional outbox: an event exists if and only if
// its mail is recorded sent), and a relay loop publishes them to the events
// exchange, persistent and mandatory, with publisher confirms, marking them
// published once the broker acked them. The inserts fire the table's notify
// trigger as mailsvc's do, though nothing listens.
//
// It still skips what mailsvc does beyond that: validation, fencing tokens,
// leases, cancels, retries, dead-lettering, the relay's per-order ordering
// and its lease, broker returns (it publishes mandatory but never reads a
// return), tracing and metrics. Its provider_message_id is a constant, not
// the SMTP server's reply. A mail's event is written when its batch is
// marked sent, up to a batch after the mail was accepted.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Statements of the floor baseline, on the mail and outbox tables of the
// migrated test schema (the same tables and indexes mailsvc writes).
const (
	// rawMarkOutboxSQL marks the rows of $1 sent and writes one EmailSent
	// per row to the outbox, addressed to the exchange $2, in one statement
	// and so one commit. The payload is built as mailsvc's EmailSent
	// envelope (about 410 bytes); the event's id is made once per row, in
	// RETURNING, so that the column and the payload carry the same one.
	rawMarkOutboxSQL = `
WITH m AS (
    UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY ($1)
    RETURNING id, gen_random_uuid() AS e, event_id, dedupe_key, order_id, revision, attempts)
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload)
SELECT e, $2, 'email.sent', 'EmailSent', order_id, dedupe_key, jsonb_build_object(
    'event_id', e, 'event_type', 'EmailSent', 'version', 1, 'occurred_at', now(), 'dedupe_key', dedupe_key,
    'data', jsonb_build_object('order_id', order_id, 'revision', revision, 'template', 'order_confirmed',
        'status', 'sent', 'attempts', attempts, 'provider', 'smtp', 'provider_message_id', '2.0.0 OK: queued',
        'source_event_id', event_id))
FROM m ORDER BY id`
	// rawUnpublishedSQL: the relay's round, answered by
	// outbox_unpublished_idx.
	rawUnpublishedSQL = `
SELECT id, event_id::text, exchange, routing_key, event_type, payload, created_at FROM outbox
WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id LIMIT $1`
	// rawPublishedSQL marks a round's rows published once the broker
	// confirmed them all.
	rawPublishedSQL = `UPDATE outbox SET published_at = now() WHERE id = ANY ($1)`
)

// rawRelayBatch is the most outbox rows one relay round publishes.
const rawRelayBatch = 100

// rawOutboxRow is an unpublished outbox row as the relay reads it.
type rawOutboxRow struct {
	id                                       int64
	eventID, exchange, routingKey, eventType string
	payload                                  []byte
	createdAt                                time.Time
}

// markSent marks a claimed batch's rows sent in one statement; with
// set.feedback the same statement writes their EmailSent events to the
// outbox, and the relay is woken once it committed.
func (r *rawPipeline) markSent(ctx context.Context, ids []int64) error {
	if !r.set.feedback {
		if _, err := r.pool.Exec(ctx, rawMarkSQL, ids); err != nil {
			return fmt.Errorf("mark raw mails sent: %w", err)
		}
		return nil
	}
	if _, err := r.pool.Exec(ctx, rawMarkOutboxSQL, ids, r.eventsExchange); err != nil {
		return fmt.Errorf("mark raw mails sent with their events: %w", err)
	}
	select {
	case r.relayWake <- struct{}{}:
	default:
	}
	return nil
}

// startRelay opens the relay's channel, in confirm mode, and starts the
// relay loop. The events exchange is the parent's to declare.
func (r *rawPipeline) startRelay(ctx context.Context) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("relay channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("relay confirm mode: %w", err)
	}
	r.relayWake = make(chan struct{}, 1)
	r.wg.Go(func() { r.relayLoop(ctx, ch) })
	return nil
}

// relayLoop publishes the outbox in rounds (relayRound): again at once
// after a full round, else after a batch's mark committed or set.poll.
func (r *rawPipeline) relayLoop(ctx context.Context, ch *amqp.Channel) {
	for ctx.Err() == nil {
		n, err := r.relayRound(ctx, ch)
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

// relayRound publishes up to rawRelayBatch unpublished rows, waits until
// the broker acked every one (a nack is an error) and marks them
// published. It returns how many rows it published.
func (r *rawPipeline) relayRound(ctx context.Context, ch *amqp.Channel) (int, error) {
	rows, err := r.unpublished(ctx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	confs := make([]*amqp.DeferredConfirmation, len(rows))
	ids := make([]int64, len(rows))
	for i, w := range rows {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, w.exchange, w.routingKey, true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: w.eventID, Type: w.eventType,
			Timestamp: w.createdAt, Body: w.payload,
		})
		if err != nil {
			return 0, fmt.Errorf("publish outbox row %d: %w", w.id, err)
		}
		confs[i], ids[i] = c, w.id
	}
	for i, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return 0, fmt.Errorf("confirm of outbox row %d: %w", ids[i], err)
		}
		if !ok {
			return 0, fmt.Errorf("the broker nacked outbox row %d", ids[i])
		}
	}
	if _, err := r.pool.Exec(ctx, rawPublishedSQL, ids); err != nil {
		return 0, fmt.Errorf("mark %d outbox rows published: %w", len(ids), err)
	}
	return len(rows), nil
}

// unpublished reads up to rawRelayBatch unpublished outbox rows, oldest
// first.
func (r *rawPipeline) unpublished(ctx context.Context) ([]rawOutboxRow, error) {
	rs, err := r.pool.Query(ctx, rawUnpublishedSQL, rawRelayBatch)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	defer rs.Close()
	var rows []rawOutboxRow
	for rs.Next() {
		var w rawOutboxRow
		if err := rs.Scan(&w.id, &w.eventID, &w.exchange, &w.routingKey, &w.eventType, &w.payload, &w.createdAt); err != nil {
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		rows = append(rows, w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return rows, nil
}

// floorEvents counts the EmailSent events the floor baseline publishes, on
// a queue bound to the events exchange as the mailsvc stack binds its own
// (newFeedbackQueue), and checks the first against the contract. The test
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
	fb := newFeedbackQueue(b, names)
	e := &floorEvents{}
	go func() {
		for d := range fb.out {
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

// settle waits until n EmailSent events arrived and n outbox rows are
// marked published (the relay marks a round after the broker's acks, so
// possibly after the events arrived), then requires exactly n of each and
// the first event within the contract.
func (e *floorEvents) settle(b *testing.B, sc *storetest.Schema, n int) {
	within := time.Minute + time.Duration(n)*time.Millisecond
	require.Eventually(b, func() bool { return e.sent.Load() >= int64(n) }, within, 10*time.Millisecond,
		"EmailSent events, want %d", n)
	require.Eventually(b, func() bool {
		return sc.QueryInt(b, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`) >= int64(n)
	}, time.Minute, 10*time.Millisecond, "outbox rows published, want %d", n)
	require.Equal(b, int64(n), e.sent.Load(), "EmailSent events")
	require.Equal(b, int64(n), sc.QueryInt(b, `SELECT count(*) FROM outbox`), "outbox rows")
	require.Equal(b, int64(n), sc.QueryInt(b, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`),
		"outbox rows published")
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Empty(b, e.reasons, "the floor's first EmailSent breaks the contract (api/asyncapi.yaml)")
}
