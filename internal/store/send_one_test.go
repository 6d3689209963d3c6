package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// finishCase runs setupPipeline's FinishAndStart on a schema of its own,
// with change applied to the attempt first, and returns the schema.
func finishCase(t *testing.T, change func(*store.Attempt)) (*storetest.Schema, []store.AttemptResult, []store.Started) {
	t.Helper()
	sc := storetest.New(t)
	c := setupPipeline(t, sc)
	change(&c.as[0])
	res, started, err := sc.Store.FinishAndStart(testCtx(t), c.as, c.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Len(t, started, 1)
	require.Equal(t, c.starts[0], started[0].Fence)
	require.Equal(t, 1, started[0].TotalSends)
	return sc, res, started
}

// eventsWithoutIDs is the outbox's payloads in id order, each without its
// event_id and occurred_at (made fresh by every write) and its
// source_event_id (each schema's own; checked against the mail's).
func eventsWithoutIDs(t *testing.T, sc *storetest.Schema) []string {
	t.Helper()
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox o JOIN mail m USING (dedupe_key)
		WHERE o.event_type <> 'EmailCancelTooLate' AND o.payload->'data'->>'source_event_id' IS DISTINCT FROM m.event_id::text`),
		"every outcome event names its mail's input event")
	return sc.QueryStrings(t, `SELECT (payload - 'event_id' - 'occurred_at' #- '{data,source_event_id}')::text FROM outbox ORDER BY id`)
}

// TestGroupCommitIsOneStatement: an outcome whose writer knows its row
// (Attempt.Known, as the sender passes it), its EmailSent and the next
// send's mark are one statement and one commit, and the event is the one
// built from the written row (the path without Known), byte for byte
// but for its fresh id and time. Not parallel: it reads the process's
// statement counter, which no other test may move meanwhile.
func TestGroupCommitIsOneStatement(t *testing.T) {
	sc := storetest.New(t)
	c := setupPipeline(t, sc)
	before := store.DBCounts()
	res, started, err := sc.Store.FinishAndStart(testCtx(t), c.as, c.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
	after := store.DBCounts()
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, mailtype.StatusSent, res[0].Status)
	require.Len(t, started, 1)
	require.Equal(t, store.Counts{Statements: 1, Commits: 1},
		store.Counts{Statements: after.Statements - before.Statements, Commits: after.Commits - before.Commits})
	requireCommitted(t, sc)

	reference, _, _ := finishCase(t, func(a *store.Attempt) { a.Known = nil })
	require.Equal(t, eventsWithoutIDs(t, reference), eventsWithoutIDs(t, sc))
	require.Len(t, eventsWithoutIDs(t, sc), 1)
}

// TestGroupCommitKnownThatMissesWritesTheRowsEvent: a Known that does not
// match the row (here its order id) never puts a wrong event on the
// outbox: the write is made again without it, and the event says what
// the row says.
func TestGroupCommitKnownThatMissesWritesTheRowsEvent(t *testing.T) {
	t.Parallel()
	sc, res, _ := finishCase(t, func(a *store.Attempt) { a.Known.OrderID = "not-this-order" })
	require.Equal(t, mailtype.StatusSent, res[0].Status)
	requireCommitted(t, sc)
	reference, _, _ := finishCase(t, func(a *store.Attempt) { a.Known = nil })
	require.Equal(t, eventsWithoutIDs(t, reference), eventsWithoutIDs(t, sc))

	// A Known with other sends than the row's (a status the row did not
	// take is the same check) is left out by the statement itself.
	sc, _, _ = finishCase(t, func(a *store.Attempt) { a.Known.Sends = 7 })
	requireCommitted(t, sc)
	require.Equal(t, eventsWithoutIDs(t, reference), eventsWithoutIDs(t, sc))
}

// TestGroupCommitKnownWithACancelDuringTheSend: a cancel committed during
// the send of a mail the provider accepted: the statement writes the
// EmailSent it knew, and the EmailCancelTooLate follows it in the same
// commit (this store renders no cancellation notice).
func TestGroupCommitKnownWithACancelDuringTheSend(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	c := setupPipeline(t, sc)
	sc.Exec(t, `UPDATE mail SET cancel_requested = true, cancel_event_id = gen_random_uuid() WHERE order_id = '1'`)
	c.as[0].Outcome.IfCancelRequested = mailtype.StatusSent
	res, started, err := sc.Store.FinishAndStart(testCtx(t), c.as, c.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
	require.NoError(t, err)
	require.Equal(t, mailtype.StatusSent, res[0].Status)
	require.Len(t, started, 1)
	require.Equal(t, []string{"EmailSent", "EmailCancelTooLate"},
		sc.QueryStrings(t, `SELECT event_type FROM outbox ORDER BY id`))
}
