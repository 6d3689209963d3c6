package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxEntry is one unpublished outbox row as `mailsvc outbox list` and
// `mailsvc outbox replay` show it.
type OutboxEntry struct {
	ID         int64  `json:"id"`
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	// DedupeKey and OrderID are those of the mail the event reports, ""
	// when none.
	DedupeKey string    `json:"dedupe_key,omitempty"`
	OrderID   string    `json:"order_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Attempts counts the failed publishes; NextAttemptAt is when the relay
	// tries again (a dead row is never tried).
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// LastError is the sanitized error of the last failed publish.
	LastError string `json:"last_error,omitempty"`
	// DeadAt is when the relay gave up on the row; nil while it retries.
	DeadAt *time.Time `json:"dead_at,omitempty"`
}

const outboxEntryColumns = `id, event_id::text, event_type, exchange, routing_key, coalesce(dedupe_key, ''),
coalesce(order_id, ''), created_at, attempts, next_attempt_at, coalesce(last_error, ''), dead_at`

// listOutboxSQL reads unpublished rows oldest first ($1: dead rows only);
// LIMIT NULL (limit 0) is no limit. Both filters read a partial index
// (outbox_unpublished_idx, outbox_dead_idx).
const listOutboxSQL = `
SELECT ` + outboxEntryColumns + ` FROM outbox
WHERE published_at IS NULL AND (dead_at IS NOT NULL OR NOT $1)
ORDER BY id LIMIT NULLIF($2::int, 0)`

// replayDeadSQL revives dead rows, oldest first: alive, due now, with a
// fresh count of attempts (relay.max_attempts starts over), their
// last_error kept until the next publish. The notification wakes a relay
// that listens.
const replayDeadSQL = `
WITH picked AS (
    SELECT id FROM outbox WHERE dead_at IS NOT NULL AND published_at IS NULL
    ORDER BY id LIMIT NULLIF($1::int, 0) FOR UPDATE),
revived AS (
    UPDATE outbox o SET dead_at = NULL, attempts = 0, next_attempt_at = now()
    FROM picked WHERE o.id = picked.id
    RETURNING o.*)
SELECT ` + outboxEntryColumns + ` FROM revived ORDER BY id`

// replayWaitingSQL makes rows that wait for a retry (alive, unpublished,
// with a failed publish and a next attempt in the future) due now; their
// attempts stay counted.
const replayWaitingSQL = `
WITH picked AS (
    SELECT id FROM outbox WHERE published_at IS NULL AND dead_at IS NULL AND attempts > 0 AND next_attempt_at > now()
    ORDER BY id LIMIT NULLIF($1::int, 0) FOR UPDATE),
due AS (
    UPDATE outbox o SET next_attempt_at = now()
    FROM picked WHERE o.id = picked.id
    RETURNING o.*)
SELECT ` + outboxEntryColumns + ` FROM due ORDER BY id`

func scanOutboxEntry(row pgx.CollectableRow) (OutboxEntry, error) {
	var e OutboxEntry
	err := row.Scan(&e.ID, &e.EventID, &e.EventType, &e.Exchange, &e.RoutingKey, &e.DedupeKey, &e.OrderID,
		&e.CreatedAt, &e.Attempts, &e.NextAttemptAt, &e.LastError, &e.DeadAt)
	return e, err
}

// ListOutbox returns the unpublished outbox rows, oldest first: every one
// (waiting for its first publish, retrying, or dead), or only the dead ones
// when deadOnly is set; at most limit rows, all of them when limit is 0.
// It returns a transient *mailtype.Error (ReasonDatabase) when the
// database is unreachable.
func (s *Store) ListOutbox(ctx context.Context, deadOnly bool, limit int) ([]OutboxEntry, error) {
	rows, err := s.pool.Query(ctx, listOutboxSQL, deadOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, scanOutboxEntry)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", interpretError(err))
	}
	return out, nil
}

// ReplayOutbox hands unpublished rows back to the relay, oldest first, at
// most limit of them (all when limit is 0), and returns them as they are
// now. With dead set it revives dead rows: alive, due now, attempts back
// to 0. Without it, it makes the rows that wait out a retry backoff due
// now (after a fix, such as binding the queue an unroutable row needed).
// It wakes a listening relay (pg_notify on the outbox channel) in the same
// transaction. A revived row is published after the rows of its order
// that went out while it was dead: a consumer of mail.events orders them
// by occurred_at, not by arrival. It returns a transient *mailtype.Error
// (ReasonDatabase) when the database is unreachable.
func (s *Store) ReplayOutbox(ctx context.Context, dead bool, limit int) ([]OutboxEntry, error) {
	q := replayWaitingSQL
	if dead {
		q = replayDeadSQL
	}
	var out []OutboxEntry
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, limit)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, scanOutboxEntry); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify((`+outboxChannelSQL+`), '')`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replay outbox: %w", interpretError(err))
	}
	return out, nil
}
