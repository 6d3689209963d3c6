package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/store"
)

// InsertOutbox writes one outbox row per feedback through the store's own
// outbox write, all in one transaction, as the consumer and the sender
// do. It exists for the relay's tests and benchmarks; production code
// writes outbox rows only together with the state change they report.
func InsertOutbox(ctx context.Context, st *store.Store, fs ...store.Feedback) error {
	ts := st.TestSupport()
	err := pgx.BeginFunc(ctx, ts.Pool, func(tx pgx.Tx) error {
		for _, f := range fs {
			if err := ts.InsertFeedback(ctx, tx, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert outbox rows: %w", err)
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
	CreatedAt   time.Time
	PublishedAt *time.Time
	DeadAt      *time.Time
}

// Outbox returns every outbox row of st, oldest first.
func Outbox(ctx context.Context, st *store.Store) ([]OutboxState, error) {
	rows, err := st.TestSupport().Pool.Query(ctx, `
SELECT id, event_id::text, coalesce(order_id, ''), routing_key, event_type, attempts,
       coalesce(last_error, ''), created_at, published_at, dead_at
FROM outbox ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxState, error) {
		var o OutboxState
		err := row.Scan(&o.ID, &o.EventID, &o.OrderID, &o.RoutingKey, &o.EventType, &o.Attempts, &o.LastError, &o.CreatedAt, &o.PublishedAt, &o.DeadAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}
