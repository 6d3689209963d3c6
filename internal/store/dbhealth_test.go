package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestHealthTablesAreTheSchema: every table the migrations create (but
// goose's own version table) is reported on, and nothing else.
func TestHealthTablesAreTheSchema(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	got := sc.QueryStrings(t, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
		AND tablename NOT LIKE 'goose%' ORDER BY tablename`)
	want := slices.Sorted(slices.Values(store.HealthTables))
	require.Equal(t, want, got, "store.HealthTables lists every table of the schema")
}

// TestDBHealthReadsTheStatistics: 100 mails, 40 deleted: the statistics
// show 60 live and 40 dead rows in mail, no vacuum yet; after a VACUUM,
// the vacuum's time. No standby streams from this server.
func TestDBHealthReadsTheStatistics(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Store
	// Through connections that close, so that their statistics are
	// flushed at once (an idle pooled backend flushes within 10 s).
	require.EqualValues(t, 100, sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status)
		SELECT 'h:' || i, 'h' || i, 'order_confirmed', 'cancelled' FROM generate_series(1, 100) i`))
	require.EqualValues(t, 40, sc.Exec(t, `DELETE FROM mail WHERE id IN (SELECT id FROM mail ORDER BY id LIMIT 40)`))
	mailOf := func() store.TableHealth {
		h, err := st.DBHealth(ctx(t))
		require.NoError(t, err)
		require.Empty(t, h.Standbys)
		require.Len(t, h.Tables, len(store.HealthTables))
		i := slices.IndexFunc(h.Tables, func(th store.TableHealth) bool { return th.Table == "mail" })
		require.GreaterOrEqual(t, i, 0)
		require.WithinDuration(t, time.Now(), h.Now, time.Minute)
		return h.Tables[i]
	}
	// Each backend flushes its table counters about once a second.
	require.Eventually(t, func() bool { m := mailOf(); return m.LiveTuples == 60 && m.DeadTuples == 40 },
		10*time.Second, 50*time.Millisecond, "%+v", mailOf())
	m := mailOf()
	require.Nil(t, m.LastVacuum)
	require.Positive(t, m.SizeBytes)

	// What the vacuum may remove depends on the oldest snapshot of the
	// whole server (other tests'), so only its time is checked.
	sc.Exec(t, `VACUUM mail`)
	require.Eventually(t, func() bool { return mailOf().LastVacuum != nil },
		10*time.Second, 50*time.Millisecond, "%+v", mailOf())
	require.EqualValues(t, 60, mailOf().LiveTuples)
}
