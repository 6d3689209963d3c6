package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ExecForTest runs one statement and returns its error, for tests that
// expect a constraint to refuse a write.
func (s *Store) ExecForTest(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

// StatsSQL is the stats statement, for tests that read its plan; its
// arguments are StatsArgs.
var StatsSQL = statsSQL

// StatsArgs are the stats statement's arguments for rule.
func StatsArgs(rule DeliveryConfirm) []any { return append(rule.args(), UnconfirmedWindow) }

// ListUnconfirmedSQL is the list statement of the delivery-unconfirmed
// mails, for tests that read its plan.
var ListUnconfirmedSQL = listUnconfirmedSQL

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

// MarkStartedSQL and RenewManySQL are the send-started mark and the lease
// renewal, for tests that read their plans; MarkArgs builds the mark's
// arguments.
const (
	MarkStartedSQL = markStartedSQL
	RenewManySQL   = renewManySQL
)

// MarkArgs is markArgs, for tests that read the mark's plan.
var MarkArgs = markArgs

// ExplainForTest returns the plan of q for args on one of the pool's
// sessions, which prefer generic plans (sessionSettings).
func (s *Store) ExplainForTest(ctx context.Context, q string, args ...any) (string, error) {
	rows, err := s.pool.Query(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// CountingConn connects to url with a tracer of its own and returns the
// connection and a function reading what the tracer counted on it.
func CountingConn(ctx context.Context, url string) (*pgx.Conn, func() Counts, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	c := &counter{}
	cfg.Tracer = c
	conn, err := pgx.ConnectConfig(ctx, cfg)
	read := func() Counts { return Counts{Statements: c.statements.Load(), Commits: c.commits.Load()} }
	return conn, read, err
}

// MarkPublishedCommitForTest runs the relay's published mark of ids under
// epoch on one connection of r and returns the synchronous_commit its
// transaction committed under and the connection's setting after it.
func MarkPublishedCommitForTest(ctx context.Context, r *RelayDB, epoch int64, ids []int64) (during, after string, marked int64, err error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return "", "", 0, err
	}
	defer c.Release()
	var held bool
	if err := c.QueryRow(ctx, markPublishedFencedSQL, epoch, ids).Scan(&held, &marked, &during); err != nil {
		return "", "", 0, err
	}
	err = c.QueryRow(ctx, "SHOW synchronous_commit").Scan(&after)
	return during, after, marked, err
}
