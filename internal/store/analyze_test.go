package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestAnalyzeStaleAnalyzesAGrownTableOnce: a fresh table with 1,200 new
// rows (over the 1,000 + 50% rule) is analyzed once, and then not again
// until it changes as much again; outbox, unchanged, never is.
func TestAnalyzeStaleAnalyzesAGrownTableOnce(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	tables, err := st.AnalyzeStale(ctx(t))
	require.NoError(t, err)
	require.Empty(t, tables, "an empty schema has nothing stale")
	insertMails(t, st, 1200, "an")
	// Each backend flushes its table counters about once a second.
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
}
