package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// InsertOutboxForTest writes one outbox row per feedback through
// insertFeedback, all in one transaction, as the consumer and the sender
// do. It exists for the relay's tests and benchmarks; production code
// writes outbox rows only together with the state change they report.
func (s *Store) InsertOutboxForTest(ctx context.Context, fs ...Feedback) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, f := range fs {
			if err := s.insertFeedback(ctx, tx, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert outbox rows: %w", interpretError(err))
	}
	return nil
}

// OutboxState is one outbox row as tests inspect it.
type OutboxState struct {
	ID          int64
	EventID     string
	OrderID     string
	RoutingKey  string
	EventType   string
	Attempts    int
	LastError   string
	PublishedAt *time.Time
	DeadAt      *time.Time
}

// OutboxForTest returns every outbox row, oldest first, for assertions in
// the relay's tests.
func (s *Store) OutboxForTest(ctx context.Context) ([]OutboxState, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, event_id::text, coalesce(order_id, ''), routing_key, event_type, attempts,
       coalesce(last_error, ''), published_at, dead_at
FROM outbox ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxState, error) {
		var o OutboxState
		err := row.Scan(&o.ID, &o.EventID, &o.OrderID, &o.RoutingKey, &o.EventType, &o.Attempts, &o.LastError, &o.PublishedAt, &o.DeadAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", interpretError(err))
	}
	return out, nil
}
