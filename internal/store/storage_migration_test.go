package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Migration 00140 takes an ACCESS EXCLUSIVE lock on mail and outbox. While
// it waits for that lock every later statement on them waits behind it, so
// a transaction left open on mail (an operator's psql, a stuck job) would
// stall every replica for as long as it stays open. The migration gives up
// after its lock timeout instead: the traffic that queued behind it goes
// on, the schema stays where it was, and a later run applies it. Rows
// written before it keep their compression and read back unchanged.
func TestMigration00140GivesUpRatherThanStallTraffic(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	migrateDownThrough(t, sc, 140)
	body := strings.Repeat("Cảm ơn quý khách đã đặt hàng. ", 300) // compressed in TOAST
	_, err := storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: "before", BodyText: body})
	require.NoError(t, err)

	hold, err := pgx.Connect(ctx, sc.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Close(context.Background()) })
	tx, err := hold.Begin(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, queryInt(t, tx, `SELECT count(*) FROM mail`)) // an idle transaction that read mail

	migrated := make(chan error, 1)
	go func() { _, err := sc.Store.MigrateUp(ctx); migrated <- err }()
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM pg_locks WHERE relation = 'mail'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`) == 1
	}, 10*time.Second, 10*time.Millisecond, "the migration waits for its lock")
	inserted := make(chan error, 1)
	go func() {
		_, err := storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: "during"})
		inserted <- err
	}()

	select {
	case err = <-migrated:
	case <-time.After(15 * time.Second):
		_ = tx.Rollback(ctx)
		<-migrated
		t.Fatal("the migration still waited for its lock after 15s, and every statement on mail with it")
	}
	require.ErrorContains(t, err, "55P03", "lock timeout")
	require.NoError(t, <-inserted, "the insert that queued behind the migration went on")
	require.ErrorIs(t, sc.Store.CheckSchema(ctx), store.ErrSchemaBehind)
	require.NoError(t, tx.Rollback(ctx))

	_, err = sc.Store.MigrateUp(ctx)
	require.NoError(t, err)
	require.NoError(t, sc.Store.CheckSchema(ctx))
	require.Equal(t, []string{"fillfactor=50"}, sc.QueryStrings(t, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'mail'::regclass`))
	_, err = storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: "after", BodyText: body})
	require.NoError(t, err)
	lz4 := sc.QueryInt(t, `SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)`)
	want := map[string]string{"before": "pglz", "after": "pglz"}
	if lz4 == 1 {
		want["after"] = "lz4"
	}
	require.Equal(t, want, sc.QueryMap(t, `SELECT order_id, pg_column_compression(body_text) FROM mail WHERE order_id <> 'during'`))
	got, err := sc.Store.ClaimMails(ctx, store.ClaimParams{Limit: 3, Lease: time.Minute, Worker: "test"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, m := range got {
		if m.OrderID != "during" {
			require.Equal(t, body, m.BodyText, m.OrderID)
		}
	}
}

func queryInt(t *testing.T, tx pgx.Tx, q string) (n int64) {
	t.Helper()
	require.NoError(t, tx.QueryRow(context.Background(), q).Scan(&n))
	return n
}
