package store

import (
	"context"
	"fmt"
)

// ExecForTest runs one statement and returns its error, for tests that
// expect a constraint to refuse a write.
func (s *Store) ExecForTest(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

// StatsSQL is the stats statement, for tests that read its plan.
const StatsSQL = statsSQL

// ListMailsSQL is the list statement of one status, for tests that read
// its plan.
func ListMailsSQL(status string) string { return fmt.Sprintf(listMailsSQL, status) }

// SettingForTest returns the value of the run-time parameter name on one
// of the pool's sessions.
func (s *Store) SettingForTest(ctx context.Context, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
