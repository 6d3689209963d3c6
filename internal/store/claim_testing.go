package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ExplainClaimForTest returns the plan (EXPLAIN, text format, not
// executed) of the claim statement for p, one line per plan line, so tests
// can check that the claim is an index scan of rows with work left. For
// tests and benchmarks only.
func (s *Store) ExplainClaimForTest(ctx context.Context, p ClaimParams) (string, error) {
	rows, err := s.pool.Query(ctx, "EXPLAIN "+claimSQL, p.Limit, p.Lease, p.Worker)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", interpretError(err))
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", interpretError(err))
	}
	return strings.Join(lines, "\n"), nil
}

// ClaimRollbackForTest runs the claim statement for p inside a transaction
// that it rolls back, and returns how many rows the claim took. It measures
// the claim's cost without draining the queue. For benchmarks only.
func (s *Store) ClaimRollbackForTest(ctx context.Context, p ClaimParams) (int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, claimSQL, p.Limit, p.Lease, p.Worker)
	if err != nil {
		return 0, fmt.Errorf("claim mails: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}

// AnalyzeForTest runs ANALYZE on the mail table, as autovacuum would after
// a bulk load, so that plans in tests see real statistics.
func (s *Store) AnalyzeForTest(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "ANALYZE mail")
	return interpretError(err)
}
