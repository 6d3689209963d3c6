package store

import "context"

// ExecForTest runs one statement and returns its error, for tests that
// expect a constraint to refuse a write.
func (s *Store) ExecForTest(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}
