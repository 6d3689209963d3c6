package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// openAs opens a store on rawURL that closes when the test ends.
func openAs(t *testing.T, ctx context.Context, rawURL string) *store.Store {
	t.Helper()
	st, err := store.Open(ctx, store.Options{URL: rawURL, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// A revoked privilege is invisible to Ping; the write check sees it on
// either table, as ingest does, and clears once the privilege is back.
func TestCheckWritableSeesARevokedPrivilege(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := storetest.New(t)
	role, roleURL := sc.NewRole(t)
	st := openAs(t, ctx, roleURL)
	require.NoError(t, st.CheckWritable(ctx))

	sc.Exec(t, "REVOKE INSERT ON mail FROM "+role)
	err := st.CheckWritable(ctx)
	require.True(t, store.IsWriteRefused(err), "%v", err)
	require.NoError(t, st.Ping(ctx), "the database still answers")
	_, err = st.Ingest(ctx, []store.IngestItem{confirm("1")})
	require.True(t, store.IsWriteRefused(err), "ingest is refused the same way: %v", err)
	require.NotEqual(t, mailtype.Permanent, mailtype.ClassOf(err), "a refusal is never the event's fault")
	sc.Exec(t, "GRANT INSERT ON mail TO "+role)
	require.NoError(t, st.CheckWritable(ctx))

	// Feedback rows (cancels, stale events, the sender) and cancels'
	// updates are writes the check covers too.
	sc.Exec(t, "REVOKE INSERT ON outbox FROM "+role)
	require.True(t, store.IsWriteRefused(st.CheckWritable(ctx)), "outbox")
	sc.Exec(t, "GRANT INSERT ON outbox TO "+role)
	sc.Exec(t, "REVOKE UPDATE ON mail FROM "+role)
	require.True(t, store.IsWriteRefused(st.CheckWritable(ctx)), "mail updates")
	sc.Exec(t, "GRANT UPDATE ON mail TO "+role)
	require.NoError(t, st.CheckWritable(ctx))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM mail`), "the check writes nothing")
}

// A database that turns read-only (here default_transaction_read_only on
// a database of the test's own, with its sessions ended as a failover
// ends them) fails the write check with 25006 while Ping answers; once it
// is writable again the check passes without a restart, although the
// pool held a session connected read-only: the refused check replaced it.
func TestCheckWritableSeesAReadOnlyDatabaseAndReconnects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := storetest.NewDatabase(t)
	st := openAs(t, ctx, db.URL)
	require.NoError(t, st.CheckWritable(ctx))

	db.Exec(t, "ALTER DATABASE "+db.Name+" SET default_transaction_read_only = on")
	db.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db.Name)
	var err error
	require.Eventually(t, func() bool {
		err = st.CheckWritable(ctx)
		return store.IsWriteRefused(err)
	}, 10*time.Second, 20*time.Millisecond, "refused once the pool reconnected: %v", err)
	require.NoError(t, st.Ping(ctx), "the database still answers")
	_, err = st.Ingest(ctx, []store.IngestItem{confirm("1")})
	require.True(t, store.IsWriteRefused(err), "ingest is refused the same way: %v", err)

	db.Exec(t, "ALTER DATABASE "+db.Name+" RESET default_transaction_read_only")
	// The pool's idle session is still read-only (the setting applies at
	// connect): the first check is refused and replaces it, the next passes.
	require.True(t, store.IsWriteRefused(st.CheckWritable(ctx)))
	require.NoError(t, st.CheckWritable(ctx), "the refused check replaced the read-only sessions")
	_, err = st.Ingest(ctx, []store.IngestItem{confirm("2")})
	require.NoError(t, err)
	require.EqualValues(t, 1, db.QueryInt(t, `SELECT count(*) FROM mail`))
}
