package consumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// openStore opens a store on rawURL for the next consumer of b; it closes
// when the test ends.
func (b *bundle) openStore(t *testing.T, rawURL string) {
	t.Helper()
	st, err := store.Open(b.ctx, store.Options{URL: rawURL, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	b.store = st
}

// requireReleased waits until the consumer gave back every delivery of
// the n events published while writes are refused (all n ready in the
// queue, none held) and checks that it then keeps off the queue.
func requireReleased(t *testing.T, b *bundle, r *running, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return r.c.ReleasesForTest() == 1 && b.queueDepth(t, b.names.Queue) == n
	}, waitFor, tick, "the deliveries go back to the queue")
	require.Error(t, r.c.WritesAccepted(b.ctx))
	require.Error(t, r.c.Ready(b.ctx), "not consuming")
	require.Never(t, func() bool {
		return b.queueDepth(t, b.names.Queue) != n || r.c.ConnectionsForTest() != 1
	}, time.Second, 50*time.Millisecond, "no delivery taken while writes are refused")
	require.Equal(t, 0, r.consumedTotal(t)-5, "nothing acked")
	require.Empty(t, b.deadLetters(t), "nothing dead-lettered")
}

// requireResumed waits for every event to be recorded once and acked.
func requireResumed(t *testing.T, b *bundle, r *running, n int, rows func() int) {
	t.Helper()
	r.waitConsumed(t, 5+n)
	require.Equal(t, 5+n, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, 5+n, rows(), "one row per event")
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue))
	require.LessOrEqual(t, r.c.RedeliveredForTest(), int64(n), "each message given back at most once")
	require.Equal(t, int64(1), r.c.ReleasesForTest())
	require.Equal(t, int64(2), r.c.ConnectionsForTest(), "consuming again on the same connection")
	require.NoError(t, r.c.WritesAccepted(b.ctx))
	require.Empty(t, b.deadLetters(t))
}

// A revoked INSERT privilege (42501) leaves the database answering Ping:
// the consumer gives its deliveries back, stays off the queue while the
// write probe is refused, and records every event once when the privilege
// is back.
func TestRevokedPrivilegeReleasesDeliveriesUntilWritesWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role, roleURL := b.sc.NewRole(t)
	b.openStore(t, roleURL)
	r := b.start(t)
	b.publish(t, "order.confirmed", confirmations(t, 50000, 5)...)
	r.waitConsumed(t, 5)

	b.sc.Exec(t, "REVOKE INSERT ON mail FROM "+role)
	const n = 20
	b.publish(t, "order.confirmed", confirmations(t, 50100, n)...)
	requireReleased(t, b, r, n)
	require.Contains(t, r.c.WritesAccepted(b.ctx).Error(), "permission denied")

	b.sc.Exec(t, "GRANT INSERT ON mail TO "+role)
	requireResumed(t, b, r, n, func() int { return b.count(t, `SELECT count(DISTINCT event_id) FROM mail`) })
}

// A database that turns read-only (25006; here default_transaction_read_only
// on a database of the test's own, its connections ended as a failover ends
// them): the same, and ingest resumes although the pool had connected
// read-only connections.
func TestReadOnlyDatabaseReleasesDeliveriesUntilWritesWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := storetest.NewDatabase(t)
	b.openStore(t, db.URL)
	r := b.start(t)
	b.publish(t, "order.confirmed", confirmations(t, 51000, 5)...)
	r.waitConsumed(t, 5)

	db.Exec(t, "ALTER DATABASE "+db.Name+" SET default_transaction_read_only = on")
	db.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db.Name)
	const n = 20
	b.publish(t, "order.confirmed", confirmations(t, 51100, n)...)
	requireReleased(t, b, r, n)
	require.Contains(t, r.c.WritesAccepted(b.ctx).Error(), "read-only")

	db.Exec(t, "ALTER DATABASE "+db.Name+" RESET default_transaction_read_only")
	requireResumed(t, b, r, n, func() int { return int(db.QueryInt(t, `SELECT count(DISTINCT event_id) FROM mail`)) })
}

// When the write probe passes but ingest is still refused (here INSERT is
// granted on the one column the probe names only), the consumer does not
// give the deliveries back a second time in the same episode: it holds
// them and retries, so no message spends a second delivery on it.
func TestRefusalPastAPassingProbeHoldsInsteadOfReleasingAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role, roleURL := b.sc.NewRole(t)
	b.openStore(t, roleURL)
	r := b.start(t)
	b.publish(t, "order.confirmed", confirmations(t, 52000, 5)...)
	r.waitConsumed(t, 5)

	b.sc.Exec(t, "REVOKE INSERT ON mail FROM "+role)
	const n = 20
	b.publish(t, "order.confirmed", confirmations(t, 52100, n)...)
	requireReleased(t, b, r, n)

	b.sc.Exec(t, "GRANT INSERT (dedupe_key) ON mail TO "+role)
	require.Eventually(t, func() bool { return r.c.ConnectionsForTest() == 2 }, waitFor, tick, "the probe passes")
	retries := r.c.RetriesForTest()
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= retries+5 }, waitFor, tick, "held and retried")
	require.Equal(t, int64(1), r.c.ReleasesForTest(), "released once per episode")
	require.Error(t, r.c.WritesAccepted(b.ctx))
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue), "held, not given back")

	b.sc.Exec(t, "GRANT INSERT ON mail TO "+role)
	requireResumed(t, b, r, n, func() int { return b.count(t, `SELECT count(DISTINCT event_id) FROM mail`) })
}
