package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestAnalyzeStaleAnalyzesAGrownTableOnce: a fresh table with 1,200 rows
// (over the 1,000-row floor) is analyzed once, and not again until it
// holds more than twice as many; outbox, empty, never is.
func TestAnalyzeStaleAnalyzesAGrownTableOnce(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	tables, err := st.AnalyzeStale(ctx(t))
	require.NoError(t, err)
	require.Empty(t, tables, "an empty schema has nothing stale")
	insertAndFlush(t, sc, 1200, "an")
	// The writer's session ended, so its table counters were flushed; the
	// statistics system still applies them asynchronously.
	require.Eventually(t, func() bool {
		tables, err = st.AnalyzeStale(ctx(t))
		require.NoError(t, err)
		return len(tables) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"mail"}, tables)
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM pg_stat_user_tables
        WHERE schemaname = current_schema() AND relname = 'mail' AND last_analyze IS NOT NULL`))
	require.Equal(t, int64(1200), sc.QueryInt(t, `SELECT reltuples::bigint FROM pg_class
        WHERE oid = 'mail'::regclass`), "the planner now knows the table's size")
	tables, err = st.AnalyzeStale(ctx(t))
	require.NoError(t, err)
	require.Empty(t, tables, "just analyzed")
	insertAndFlush(t, sc, 1300, "again")
	require.Eventually(t, func() bool {
		tables, err = st.AnalyzeStale(ctx(t))
		require.NoError(t, err)
		return len(tables) > 0
	}, 10*time.Second, 50*time.Millisecond, "2,500 rows > 2 x 1,200")
	require.Equal(t, []string{"mail"}, tables)
	require.Equal(t, int64(2500), sc.QueryInt(t, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'mail'::regclass`))
}

// insertAndFlush inserts n pending mails through a session of its own
// that then ends: a backend left idle in a pool flushes its table
// counters only after PostgreSQL's idle interval (10 s), one that ends
// flushes them at once, so the test does not wait on a timer.
func insertAndFlush(t *testing.T, sc *storetest.Schema, n int, prefix string) {
	t.Helper()
	writer := sc.Open(t, store.Options{MaxConns: 1})
	insertMails(t, writer, n, prefix)
	writer.Close()
}

// stale seeds n pending rows into sc and waits until the statistics
// system counts them: the rows are written by a session that then ends,
// which flushes its counters.
func stale(t *testing.T, sc *storetest.Schema, n int) {
	t.Helper()
	seeder := sc.Open(t, store.Options{MaxConns: 1})
	require.NoError(t, storetest.Seed(ctx(t), seeder, "st-", mailtype.StatusPending, n))
	seeder.Close()
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT n_live_tup FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname = 'mail'`) >= int64(n)
	}, 10*time.Second, 20*time.Millisecond)
}

// TestAnalyzeStaleLeavesTablesItMayNotAnalyze: a role that does not own
// the tables may not analyze them (PostgreSQL skips them with a warning in
// the server's log, every time): AnalyzeStale does not ask, does not
// report them analyzed, and the owner's store still analyzes them.
func TestAnalyzeStaleLeavesTablesItMayNotAnalyze(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	stale(t, sc, 1200)
	_, roleURL := sc.NewRole(t)
	st, err := store.Open(ctx(t), store.Options{URL: roleURL, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	for range 2 {
		tables, err := st.AnalyzeStale(ctx(t))
		require.NoError(t, err)
		require.Empty(t, tables, "not the owner: nothing analyzed")
	}
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT analyze_count FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname = 'mail'`))
	tables, err := sc.Store.AnalyzeStale(ctx(t))
	require.NoError(t, err)
	require.Equal(t, []string{"mail"}, tables)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT analyze_count FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname = 'mail'`))
}

// TestAnalyzeStaleDoesNotWaitForAnotherAnalyze: while another session
// holds the table's analyze lock (another replica analyzing it, or
// autovacuum's VACUUM, which a waiting ANALYZE would have cancelled after
// deadlock_timeout), AnalyzeStale skips the table at once instead of
// queuing behind it and then analyzing again what was just analyzed.
func TestAnalyzeStaleDoesNotWaitForAnotherAnalyze(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	stale(t, sc, 1200)
	conn, err := pgx.Connect(ctx(t), sc.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx(t))
	require.NoError(t, err)
	_, err = tx.Exec(ctx(t), `LOCK TABLE mail IN SHARE UPDATE EXCLUSIVE MODE`)
	require.NoError(t, err)

	type result struct {
		tables []string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		tables, err := sc.Store.AnalyzeStale(ctx(t))
		done <- result{tables, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Empty(t, r.tables, "skipped, not analyzed")
	case <-time.After(10 * time.Second):
		t.Fatal("AnalyzeStale waits for the lock another session holds")
	}
	require.NoError(t, tx.Rollback(ctx(t)))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT analyze_count FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname = 'mail'`))
	tables, err := sc.Store.AnalyzeStale(ctx(t))
	require.NoError(t, err)
	require.Equal(t, []string{"mail"}, tables, "still stale, analyzed once the lock is free")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT analyze_count FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname = 'mail'`))
}
