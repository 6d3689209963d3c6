package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// The budget of docs/benchmarks.md counts statements and commits the way
// PostgreSQL's xact_commit does: an autocommit statement is one commit, a
// transaction one, a pipelined batch without BEGIN one, BEGIN and COMMIT
// are no statements, a failed transaction commits nothing.
func TestCountsStatementsAndCommits(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	conn, read, err := store.CountingConn(ctx, sc.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	step := func(want store.Counts, do func()) {
		t.Helper()
		before := read()
		do()
		after := read()
		require.Equal(t, want, store.Counts{Statements: after.Statements - before.Statements, Commits: after.Commits - before.Commits})
	}
	exec := func(q string) {
		t.Helper()
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	step(store.Counts{Statements: 1, Commits: 1}, func() { exec("SELECT 1") })
	step(store.Counts{Statements: 2, Commits: 1}, func() {
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT 2")
			return err
		}))
	})
	step(store.Counts{Statements: 3, Commits: 1}, func() {
		b := &pgx.Batch{}
		for range 3 {
			b.Queue("SELECT 1")
		}
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	})
	step(store.Counts{Statements: 2, Commits: 1}, func() {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT 1")
		b.Queue("SELECT 2")
		b.Queue("COMMIT")
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	})
	step(store.Counts{Statements: 1, Commits: 0}, func() {
		exec("BEGIN")
		exec("SELECT 1")
		_, err := conn.Exec(ctx, "SELECT 1/0")
		require.Error(t, err)
		exec("ROLLBACK")
	})
}
