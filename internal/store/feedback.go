package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/api/feedback"
)

// Feedback is one output event (docs/contract.md, "Output") to be written to the
// outbox in the same transaction as the state change it reports. Its body
// is encoded by the contract's own package (api/feedback); the store
// writes it and keeps only the SQL.
type Feedback = feedback.Event

// ProviderEvent is one report a provider made about a mail it had accepted
// (a webhook), as data.provider_event publishes it (api/feedback).
type ProviderEvent = feedback.ProviderEvent

// insertOutboxSQL takes the payload ($7) as text: in the exec and
// simple_protocol query modes a []byte argument goes over as bytea, which
// jsonb refuses.
const insertOutboxSQL = `
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, created_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, nullif($9, ''))`

// insertOutboxManySQL writes many outbox rows in one statement (one
// executor run, one firing of the statement trigger that notifies the
// relay), in the order of the arrays.
const insertOutboxManySQL = outboxInsertSQL + outboxUnnestSQL + `
LEFT JOIN LATERAL (` + omittedAttachmentsSQL + `) om ON true`

// outboxInsertSQL inserts the outbox rows of outboxArgs ($1..$9) from the
// rows u of the FROM clause that follows it (outboxUnnestSQL, with the
// lateral om of omittedAttachmentsSQL).
const outboxInsertSQL = `
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, created_at, trace_context)
SELECT u.e, $2, u.rk, u.et, u.o, u.k,
       CASE WHEN om.names IS NULL THEN u.p::jsonb ELSE jsonb_set(u.p::jsonb, '{data,omitted_attachments}', om.names) END,
       u.c, nullif(u.tc, '')
FROM `

// outboxUnnestSQL is the rows of outboxArgs' arrays.
const outboxUnnestSQL = `unnest($1::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[])
    AS u(e, rk, et, o, k, p, c, tc)`

// outboxRow is the outbox row of one feedback event, addressed to the
// store's events exchange.
type outboxRow struct {
	eventID                                   uuid.UUID
	routingKey, eventType, orderID, dedupeKey string
	payload                                   string // the JSON envelope
	createdAt                                 time.Time
	traceContext                              string
}

// outboxRowOf encodes f as its outbox row (feedback.New): the event_id is
// a fresh UUIDv7, made now (not at publish), so a re-publish carries the
// same id.
func outboxRowOf(f Feedback) (outboxRow, error) {
	m, err := feedback.New(f)
	if err != nil {
		return outboxRow{}, err
	}
	return outboxRow{eventID: m.ID, routingKey: m.RoutingKey, eventType: string(m.Type), orderID: f.OrderID,
		dedupeKey: f.DedupeKey, payload: string(m.Body), createdAt: m.At, traceContext: f.TraceContext}, nil
}

// insertFeedback writes f as an outbox row inside tx. The caller commits.
func (s *Store) insertFeedback(ctx context.Context, tx dbtx, f Feedback) error {
	r, err := outboxRowOf(f)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, insertOutboxSQL, r.eventID, s.eventsExchange, r.routingKey, r.eventType, r.orderID, r.dedupeKey, r.payload, r.createdAt, r.traceContext)
	if err != nil {
		return fmt.Errorf("insert outbox %s: %w", f.Type, interpretError(err))
	}
	return nil
}

// insertFeedbacks writes fs as outbox rows inside tx, in their order, with
// one statement (insertOutboxManySQL) whatever their number. The caller
// commits.
func (s *Store) insertFeedbacks(ctx context.Context, tx dbtx, fs []Feedback) error {
	if len(fs) == 0 {
		return nil
	}
	args, err := s.outboxArgs(fs)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, insertOutboxManySQL, args...); err != nil {
		return fmt.Errorf("insert %d outbox rows: %w", len(fs), interpretError(err))
	}
	return nil
}

// outboxArgs are insertOutboxManySQL's arguments for fs.
func (s *Store) outboxArgs(fs []Feedback) ([]any, error) {
	n := len(fs)
	// The ids go as text: in the simple_protocol query mode pgx cannot
	// encode a []uuid.UUID.
	ids := make([]string, n)
	keys, types, orders, dedupe, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	created, traces := make([]time.Time, n), make([]string, n)
	for i, f := range fs {
		r, err := outboxRowOf(f)
		if err != nil {
			return nil, err
		}
		ids[i], keys[i], types[i], orders[i], dedupe[i], payloads[i], created[i], traces[i] =
			r.eventID.String(), r.routingKey, r.eventType, r.orderID, r.dedupeKey, r.payload, r.createdAt, r.traceContext
	}
	return []any{ids, s.eventsExchange, keys, types, orders, dedupe, payloads, created, traces}, nil
}
