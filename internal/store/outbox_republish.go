package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RepublishFilter selects published feedback events for `mailsvc outbox
// republish`. The fields narrow the selection together (AND); an empty
// field does not narrow it.
type RepublishFilter struct {
	// OrderIDs are the orders whose events are taken.
	OrderIDs []string
	// Since and Until bound published_at: Since <= published_at < Until;
	// the zero time is no bound.
	Since, Until time.Time
	// Types are the event types taken (EmailSent, ...).
	Types []string
	// KeptFor is retention.window: a row published longer ago than that
	// is past its retention (the relay deletes it on its next pass) and
	// is not taken; 0 takes every row still present.
	KeptFor time.Duration
	// Limit is the most rows returned; 0 means all.
	Limit int
}

// PublishedEvent is a published outbox row that can be published again:
// the row as the relay publishes it, and when it was published.
type PublishedEvent struct {
	OutboxRow
	OrderID     string
	PublishedAt time.Time
}

// republishSQL reads published rows in write order (id), which is the
// order the relay published each order's events in, in one pass over the
// outbox (what retention keeps: retention.window of feedback events) per
// republish run. No index serves the order filter on purpose: one more
// index on outbox would cost every mail an index entry at its publish, for
// a command an operator runs after an incident.
const republishSQL = `
SELECT o.id, o.event_id::text, o.exchange, o.routing_key, o.event_type, coalesce(o.dedupe_key, ''),
       o.payload::text, o.created_at, o.attempts, coalesce(o.trace_context, ''), coalesce(o.order_id, ''), o.published_at
FROM outbox o
WHERE o.published_at IS NOT NULL
  AND (cardinality($1::text[]) = 0 OR o.order_id = ANY($1))
  AND ($2::timestamptz IS NULL OR o.published_at >= $2)
  AND ($3::timestamptz IS NULL OR o.published_at < $3)
  AND (cardinality($4::text[]) = 0 OR o.event_type = ANY($4))
  AND ($5::bigint = 0 OR o.published_at >= now() - $5 * interval '1 millisecond')
ORDER BY o.id
LIMIT NULLIF($6::int, 0)`

// PublishedEvents returns the published feedback events f selects, in
// the order they were written (each order's events in the order the relay
// published them). Rows deleted by the retention pass are gone: only
// events published within retention.window can be returned. It returns a
// transient *mailtype.Error (ReasonDatabase) when the database is
// unreachable.
func (s *Store) PublishedEvents(ctx context.Context, f RepublishFilter) ([]PublishedEvent, error) {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	orders, types := f.OrderIDs, f.Types
	if orders == nil {
		orders = []string{}
	}
	if types == nil {
		types = []string{}
	}
	rows, err := s.pool.Query(ctx, republishSQL, orders, since, until, types, f.KeptFor.Milliseconds(), f.Limit)
	if err != nil {
		return nil, fmt.Errorf("read published outbox rows: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PublishedEvent, error) {
		var e PublishedEvent
		var payload string
		err := row.Scan(&e.ID, &e.EventID, &e.Exchange, &e.RoutingKey, &e.EventType, &e.DedupeKey, &payload,
			&e.CreatedAt, &e.Attempts, &e.TraceContext, &e.OrderID, &e.PublishedAt)
		e.Payload = []byte(payload)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read published outbox rows: %w", interpretError(err))
	}
	return out, nil
}
