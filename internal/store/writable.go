package store

import (
	"context"
	"fmt"
)

// checkWritableSQL writes nothing, yet PostgreSQL runs its read-only and
// privilege checks on every table a statement would write before it looks
// at a single row: a zero-row INSERT into mail and outbox and a zero-row
// UPDATE of mail fail exactly as ingest would (25006 on a standby or under
// default_transaction_read_only, 42501 without the privilege), through the
// same pool and session settings, at the cost of a plan and no WAL, no
// row, no lock anyone waits for.
const checkWritableSQL = `
WITH m AS (INSERT INTO mail (dedupe_key) SELECT NULL::text WHERE false RETURNING 1),
     o AS (INSERT INTO outbox (event_id) SELECT NULL::uuid WHERE false RETURNING 1)
UPDATE mail SET updated_at = updated_at WHERE false`

// CheckWritable proves that the database accepts this process's writes to
// mail and outbox, not only that it answers: it returns an error for which
// IsWriteRefused is true when the server is read-only (a standby after a
// failover, default_transaction_read_only) or a privilege is missing, and
// a transient database error when the server cannot be reached. A
// read-only session is a property of the connection, so on that error the
// pool's connections are replaced (pgxpool.Pool.Reset): the next attempt
// connects afresh and finds a writable server as soon as there is one. It
// is cheap enough for every readiness probe and safe for concurrent use.
func (s *Store) CheckWritable(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, checkWritableSQL)
	if err == nil {
		return nil
	}
	if sqlState(err) == sqlReadOnly {
		s.pool.Reset()
	}
	return fmt.Errorf("check that the database accepts writes: %w", interpretError(err))
}
