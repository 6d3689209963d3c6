package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

type outboxBundle struct {
	sc   *storetest.Schema
	sess *relaySession
}

// relaySession is a RelayDB holding the lease of epoch, so that the fenced
// calls can be made as the leader makes them.
type relaySession struct {
	*store.RelayDB
	epoch int64
}

func (s *relaySession) FetchOutbox(ctx context.Context, limit int) ([]store.OutboxRow, error) {
	return s.RelayDB.FetchOutbox(ctx, s.epoch, limit, nil)
}

func (s *relaySession) RecordOutboxResults(ctx context.Context, published []int64, failed []store.OutboxFailure, maxAttempts int) ([]store.OutboxAttempt, error) {
	return s.RelayDB.RecordOutboxResults(ctx, s.epoch, published, failed, maxAttempts)
}

func openRelay(t *testing.T, sc *storetest.Schema, appName string) *store.RelayDB {
	t.Helper()
	db, err := sc.Store.OpenRelay(appName, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func setupOutbox(t *testing.T) *outboxBundle {
	t.Helper()
	sc := storetest.New(t)
	db := openRelay(t, sc, "relay-"+sc.Name)
	epoch, held, err := db.AcquireLease(testCtx(t), "leader", time.Hour)
	require.NoError(t, err)
	require.True(t, held)
	return &outboxBundle{sc: sc, sess: &relaySession{RelayDB: db, epoch: epoch}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func feedback(orderID string) store.Feedback {
	return store.Feedback{
		Type: mailtype.EmailSent, DedupeKey: mailtype.ConfirmationKey(orderID), OrderID: orderID,
		Template: "order_confirmed", Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp",
	}
}

// rowIDs returns the ids of the outbox rows of orderID, oldest first.
func (b *outboxBundle) rowIDs(t *testing.T, orderID string) []int64 {
	t.Helper()
	n := b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE order_id = $1`, orderID)
	ids := make([]int64, 0, n)
	for i := int64(0); i < n; i++ {
		ids = append(ids, b.sc.QueryInt(t, `SELECT id FROM outbox WHERE order_id = $1 ORDER BY id OFFSET $2 LIMIT 1`, orderID, i))
	}
	return ids
}

func fetchIDs(t *testing.T, sess *relaySession, limit int) []int64 {
	t.Helper()
	rows, err := sess.FetchOutbox(testCtx(t), limit)
	require.NoError(t, err)
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestFetchOutboxKeepsOneOrderInWriteOrder(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2"), feedback("1"), feedback("")))
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("")))
	a, bID := b.rowIDs(t, "1"), b.rowIDs(t, "2")
	none := b.rowIDs(t, "")
	require.Len(t, a, 2)
	require.Len(t, none, 2)

	// a[1] waits behind a[0]; rows without an order id never wait.
	require.Equal(t, []int64{a[0], bID[0], none[0], none[1]}, fetchIDs(t, b.sess, 10))
	require.Equal(t, []int64{a[0], bID[0]}, fetchIDs(t, b.sess, 2))

	rows, err := b.sess.FetchOutbox(ctx, 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, "email.sent", r.RoutingKey)
	require.Equal(t, "EmailSent", r.EventType)
	require.Equal(t, "mail.events", r.Exchange)
	require.Equal(t, 0, r.Attempts)
	require.Contains(t, string(r.Payload), `"event_id": "`+r.EventID+`"`)

	// Publishing a[0] releases a[1].
	_, err = b.sess.RecordOutboxResults(ctx, []int64{a[0], bID[0]}, nil, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{a[1], none[0], none[1]}, fetchIDs(t, b.sess, 10))
	require.Equal(t, int64(2), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`))
}

func TestRecordOutboxResultsCountsAttemptsAndKills(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("1"), feedback("2")))
	a, other := b.rowIDs(t, "1"), b.rowIDs(t, "2")[0]

	fail := func(id int64, mayDie bool) []store.OutboxAttempt {
		got, err := b.sess.RecordOutboxResults(ctx, nil, []store.OutboxFailure{{ID: id, Error: "unroutable: no queue", MayDie: mayDie}}, 2)
		require.NoError(t, err)
		return got
	}
	got := fail(a[0], true)
	require.Len(t, got, 1)
	require.Equal(t, 1, got[0].Attempts)
	require.False(t, got[0].Dead)
	require.Equal(t, []int64{a[0], other}, fetchIDs(t, b.sess, 10), "still held: a[1] waits")

	got = fail(a[0], true)
	require.True(t, got[0].Dead)
	require.Equal(t, 2, got[0].Attempts)
	require.Equal(t, "EmailSent", got[0].EventType)
	require.Equal(t, []int64{a[1], other}, fetchIDs(t, b.sess, 10), "a dead row holds nothing back")
	require.Equal(t, int64(1), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL AND last_error = 'unroutable: no queue' AND published_at IS NULL`))

	// An outage failure counts the attempt but never kills.
	for i := 1; i <= 3; i++ {
		got = fail(other, false)
		require.Equal(t, i, got[0].Attempts)
		require.False(t, got[0].Dead)
	}
	// A dead row is not counted again; a published row is not touched.
	_, err := b.sess.RecordOutboxResults(ctx, []int64{a[1]}, nil, 2)
	require.NoError(t, err)
	got, err = b.sess.RecordOutboxResults(ctx, nil, []store.OutboxFailure{{ID: a[0], MayDie: true}, {ID: a[1], MayDie: true}}, 2)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestRecordOutboxResultsDelaysRetry(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2")))
	one, two := b.rowIDs(t, "1")[0], b.rowIDs(t, "2")[0]
	_, err := b.sess.RecordOutboxResults(ctx, nil, []store.OutboxFailure{{ID: one, RetryIn: time.Hour, MayDie: true}}, 5)
	require.NoError(t, err)
	require.Equal(t, []int64{two}, fetchIDs(t, b.sess, 10))
	require.Equal(t, int64(1), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE id = $1 AND next_attempt_at > now() + interval '59 minutes'`, one))
}

func TestDeletePublishedOutboxInBatches(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	fs := make([]store.Feedback, 7)
	for i := range fs {
		fs[i] = feedback("")
	}
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, fs...))
	// 5 published long ago, 1 published now, 1 dead and never published.
	b.sc.Exec(t, `UPDATE outbox SET published_at = now() - interval '30 days' WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 5)`)
	b.sc.Exec(t, `UPDATE outbox SET published_at = now() WHERE id = (SELECT id FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1)`)
	b.sc.Exec(t, `UPDATE outbox SET dead_at = now() - interval '30 days', attempts = 10 WHERE published_at IS NULL`)

	before := time.Now().Add(-14 * 24 * time.Hour)
	for _, want := range []int64{2, 2, 1, 0} {
		n, err := b.sess.DeletePublishedOutbox(ctx, before, 2)
		require.NoError(t, err)
		require.Equal(t, want, n)
	}
	require.Equal(t, int64(2), b.sc.QueryInt(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, int64(1), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL`))
}

func TestOutboxListenerWakesOnInsert(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	l, err := b.sc.Store.ListenOutbox(ctx, "relay-listen-test")
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2")))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, l.Wait(wctx))

	// Nothing else written: the wait ends with the context's error.
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	err = l.Wait(short)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
}

// TestPublishedMarkDoesNotWaitForTheFlush: the relay's published mark
// commits with synchronous_commit off for its own transaction only: the
// rows are marked, and the connection's setting is back to on after it
// (a lease write on the same connection still waits for the flush).
func TestPublishedMarkDoesNotWaitForTheFlush(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2")))
	ids := fetchIDs(t, b.sess, 10)
	require.Len(t, ids, 2)

	during, after, marked, err := store.MarkPublishedCommitForTest(ctx, b.sess.RelayDB, b.sess.epoch, ids)
	require.NoError(t, err)
	require.Equal(t, "off", during, "the mark's commit does not wait for the WAL flush")
	require.Equal(t, "on", after, "only for its own transaction")
	require.EqualValues(t, 2, marked)
	require.Empty(t, fetchIDs(t, b.sess, 10), "both rows are published")
}

// TestFetchOutboxWritesTheOwedMarks: a fetch given the previous round's
// acked rows marks them published in its own statement and takes what
// they released (the next row of their order), never those rows again;
// a fetch of an epoch that no longer holds the lease marks nothing.
func TestFetchOutboxWritesTheOwedMarks(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2"), feedback("1")))
	a, bID := b.rowIDs(t, "1"), b.rowIDs(t, "2")
	require.Equal(t, []int64{a[0], bID[0]}, fetchIDs(t, b.sess, 10))

	rows, err := b.sess.RelayDB.FetchOutbox(ctx, b.sess.epoch, 10, []int64{a[0], bID[0]})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, a[1], rows[0].ID, "the marked rows released the next row of their order")
	require.Equal(t, map[string]string{"1": "1", "2": "1"}, b.sc.QueryMap(t,
		`SELECT order_id, count(*)::text FROM outbox WHERE published_at IS NOT NULL GROUP BY order_id`))

	stale, err := b.sess.RelayDB.FetchOutbox(ctx, b.sess.epoch+1, 10, []int64{a[1]})
	require.NoError(t, err)
	require.Empty(t, stale, "no lease, no rows")
	require.EqualValues(t, 0, b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE id = $1 AND published_at IS NOT NULL`, a[1]),
		"no lease, no mark")
}
