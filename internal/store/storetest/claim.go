package storetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/store"
)

// ExplainClaim returns the plan (EXPLAIN, text format, not executed) of
// the claim statement of st for p, one line per plan line, so tests can
// check that the claim is an index scan of rows with work left.
func ExplainClaim(ctx context.Context, st *store.Store, p store.ClaimParams) (string, error) {
	ts := st.TestSupport()
	rows, err := ts.Pool.Query(ctx, "EXPLAIN "+ts.ClaimSQL, p.Limit, p.Lease, p.Worker, p.PriorityRows())
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// ClaimRollback runs the claim statement of st for p inside a transaction
// that it rolls back, and returns how many rows the claim took. It
// measures the claim's cost without draining the queue (benchmarks).
func ClaimRollback(ctx context.Context, st *store.Store, p store.ClaimParams) (int, error) {
	ts := st.TestSupport()
	tx, err := ts.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, ts.ClaimSQL, p.Limit, p.Lease, p.Worker, p.PriorityRows())
	if err != nil {
		return 0, fmt.Errorf("claim mails: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Analyze runs ANALYZE on the mail and suppression tables of st, as
// autovacuum would after a bulk load, so that plans in tests see real
// statistics.
func Analyze(ctx context.Context, st *store.Store) error {
	_, err := st.TestSupport().Pool.Exec(ctx, "ANALYZE mail, suppression")
	return err
}

// SetLeaseLeft makes the leases of the rows ids end left from now
// (locked_until = now() + left, database clock), as if they had waited
// that long since their claim: for tests of what a send-started mark does
// with an aged lease.
func SetLeaseLeft(ctx context.Context, st *store.Store, ids []int64, left time.Duration) error {
	_, err := st.TestSupport().Pool.Exec(ctx, `UPDATE mail SET locked_until = now() + $2::interval WHERE id = ANY ($1)`, ids, left)
	if err != nil {
		return fmt.Errorf("set lease left of %d rows: %w", len(ids), err)
	}
	return nil
}
