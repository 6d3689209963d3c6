package store

import (
	"context"
	"fmt"

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
