package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSupport is what package storetest needs from inside a store to
// write and inspect the rows tests need without the consumer or the
// sender: the store's pool, its claim statement and its outbox write. It
// holds references to production code and nothing else.
type TestSupport struct {
	// Pool is the store's connection pool.
	Pool *pgxpool.Pool
	// ClaimSQL is the claim statement: $1 the limit, $2 the lease
	// (interval), $3 the worker, $4 the priority lane's share
	// (ClaimParams.PriorityRows).
	ClaimSQL string
	// InsertFeedback writes f inside tx as the outbox row the store writes
	// for it (its events exchange, a fresh UUIDv7 event id).
	InsertFeedback func(ctx context.Context, tx pgx.Tx, f Feedback) error
}

// TestSupport returns the parts of s that package storetest uses. Only
// storetest and test files may call it; TestOnlyStoretestCallsTestSupport
// (testsupport_test.go) fails when any other file of the module does.
func (s *Store) TestSupport() TestSupport {
	return TestSupport{
		Pool:     s.pool,
		ClaimSQL: claimSQL,
		InsertFeedback: func(ctx context.Context, tx pgx.Tx, f Feedback) error {
			return s.insertFeedback(ctx, tx, f)
		},
	}
}
