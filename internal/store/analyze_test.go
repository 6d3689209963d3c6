package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	insertMails(t, st, 1300, "again")
	require.Eventually(t, func() bool {
		tables, err = st.AnalyzeStale(ctx(t))
		require.NoError(t, err)
		return len(tables) > 0
	}, 10*time.Second, 50*time.Millisecond, "2,500 rows > 2 x 1,200")
	require.Equal(t, []string{"mail"}, tables)
	require.Equal(t, int64(2500), sc.QueryInt(t, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'mail'::regclass`))
}

// TestSessionsPreferGenericPlans: a pool in the default cache_statement
// mode plans its prepared statements generically; one in a pooler mode
// leaves the server's setting alone, and so does a URL that sets it.
func TestSessionsPreferGenericPlans(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for mode, want := range map[string]string{
		"cache_statement": "force_generic_plan",
		"simple_protocol": "auto",
		"exec":            "auto",
	} {
		st := sc.OpenInMode(t, mode)
		got, err := st.Setting(ctx(t), "plan_cache_mode")
		require.NoError(t, err)
		require.Equal(t, want, got, mode)
	}
	st, err := store.Open(ctx(t), store.Options{URL: storetest.WithParam(sc.URL, "plan_cache_mode", "force_custom_plan"), MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	got, err := st.Setting(ctx(t), "plan_cache_mode")
	require.NoError(t, err)
	require.Equal(t, "force_custom_plan", got)
}
