package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func claimParams(limit int) store.ClaimParams {
	return store.ClaimParams{Limit: limit, Lease: time.Minute, Worker: "test"}
}

func insertMails(t *testing.T, st *store.Store, n int, prefix string) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		id, err := storetest.InsertPending(context.Background(), st, storetest.Mail{OrderID: fmt.Sprintf("%s%d", prefix, i)})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

func TestClaimNeverExceedsBatchUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	require.NoError(t, storetest.Seed(context.Background(), sc.Store, "k", mailtype.StatusPending, 200))

	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				got, err := sc.Store.ClaimMails(context.Background(), claimParams(3))
				if !assertNoError(t, err) {
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				if len(got) > 3 {
					t.Errorf("claim returned %d rows, batch is 3", len(got))
				}
				for _, m := range got {
					seen[m.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 200)
	for id, n := range seen {
		require.Equal(t, 1, n, "mail %d claimed %d times", id, n)
	}
	require.EqualValues(t, 200, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND attempts = 1 AND locked_by = 'test'`))
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("claim: %v", err)
		return false
	}
	return true
}

func TestClaimTakesDueAndExpiredRowsOnly(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 7, "o")
	// 0: due pending; 1: pending later; 2: pending with cancel requested;
	// 3: expired lease, send never started; 4: expired lease, cancel
	// requested; 5: expired lease, send started (the janitor's); 6: live
	// lease.
	sc.Exec(t, `UPDATE mail SET send_after = now() + interval '1 hour' WHERE id = $1`, ids[1])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[2])
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 2, locked_until = now() - interval '1 second' WHERE id = ANY($1)`, ids[3:6])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[4])
	sc.Exec(t, `UPDATE mail SET send_started_at = now() - interval '1 minute', sends = 1 WHERE id = $1`, ids[5])
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, locked_until = now() + interval '1 hour' WHERE id = $1`, ids[6])

	got, err := sc.Store.ClaimMails(ctx, claimParams(10))
	require.NoError(t, err)
	require.Len(t, got, 2)
	byID := map[int64]store.ClaimedMail{got[0].ID: got[0], got[1].ID: got[1]}
	require.Contains(t, byID, ids[0])
	require.Contains(t, byID, ids[3])
	require.Equal(t, 1, byID[ids[0]].Token)
	require.False(t, byID[ids[0]].Reclaimed)
	require.Equal(t, 3, byID[ids[3]].Token)
	require.True(t, byID[ids[3]].Reclaimed)
	m := byID[ids[0]]
	require.Equal(t, "Nguyễn Văn B", m.ToName)
	require.Equal(t, "order-confirmed:o0", m.DedupeKey)
	require.Equal(t, mailtype.MessageID("order-confirmed:o0", "example.com"), m.MessageID)
	require.WithinDuration(t, time.Now().Add(time.Minute), m.LockedUntil, 10*time.Second)
	require.False(t, m.FirstAttemptAt.IsZero())

	again, err := sc.Store.ClaimMails(ctx, claimParams(10))
	require.NoError(t, err)
	require.Empty(t, again)
}

func TestClaimFillsBatchWithDueRowsAfterExpiredOnes(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ids := insertMails(t, sc.Store, 6, "o")
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, locked_until = now() - interval '1 second' WHERE id = ANY($1)`, ids[:2])

	got, err := sc.Store.ClaimMails(context.Background(), claimParams(4))
	require.NoError(t, err)
	require.Len(t, got, 4)
	reclaimed := 0
	for _, m := range got {
		if m.Reclaimed {
			reclaimed++
		}
	}
	require.Equal(t, 2, reclaimed)
}

func TestFinishAttemptIsFencedByToken(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	insertMails(t, sc.Store, 1, "o")
	first, err := sc.Store.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, first, 1)

	// The lease expires; another worker reclaims the row.
	sc.Exec(t, `UPDATE mail SET locked_until = now() - interval '1 second'`)
	second, err := sc.Store.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, 2, second[0].Token)

	// The first worker's late writes change nothing, and it can no longer
	// start a send.
	_, err = finishOne(t, sc.Store, first[0].Fence, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	renewed, err := sc.Store.RenewLeases(ctx, []store.Fence{first[0].Fence}, time.Hour)
	require.NoError(t, err)
	require.Empty(t, renewed, "the lease was lost")
	started, err := sc.Store.MarkStarted(ctx, []store.Fence{first[0].Fence}, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Empty(t, started)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND attempts = 2 AND sent_at IS NULL`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	renewed, err = sc.Store.RenewLeases(ctx, []store.Fence{second[0].Fence}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []store.Fence{second[0].Fence}, renewed)
	started, err = sc.Store.MarkStarted(ctx, []store.Fence{second[0].Fence}, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []store.Started{{Fence: second[0].Fence, Sends: 1, TotalSends: 1, LeaseLeft: time.Hour}}, started)
	fin, err := finishOne(t, sc.Store, second[0].Fence, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "250 ok"})
	require.NoError(t, err)
	require.Equal(t, store.Finished{Status: mailtype.StatusSent, Event: mailtype.EmailSent}, statusEvent(fin))
	require.Equal(t, second[0].DedupeKey, fin.DedupeKey)
	require.Equal(t, second[0].EventID, fin.EventID)
	require.Equal(t, 1, fin.Sends, "the sends started, as the feedback counts them")
	require.WithinDuration(t, second[0].CreatedAt, fin.CreatedAt, time.Millisecond)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 2 AND sent_at IS NOT NULL AND locked_until IS NULL AND provider_message_id = '250 ok'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent' AND payload->'data'->>'attempts' = '1'`),
		"attempts in feedback counts sends, not claims")

	// A finished row cannot be finished again.
	_, err = finishOne(t, sc.Store, second[0].Fence, store.Outcome{Status: mailtype.StatusFailed})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

func TestFinishAttemptRetryAndCancel(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 2, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(2))
	require.NoError(t, err)
	require.Len(t, got, 2)
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[1])

	retry := store.Outcome{Status: mailtype.StatusPending, IfCancelRequested: mailtype.StatusCancelled, RetryAfter: time.Hour,
		Provider: "smtp", ErrorClass: mailtype.Transient, ErrorReason: mailtype.ReasonDeferred, Error: "451 try later"}
	for _, m := range got {
		fin, err := finishOne(t, sc.Store, m.Fence, retry)
		require.NoError(t, err)
		if m.ID == ids[1] {
			require.Equal(t, store.Finished{Status: mailtype.StatusCancelled, Event: mailtype.EmailCancelled}, statusEvent(fin))
		} else {
			require.Equal(t, store.Finished{Status: mailtype.StatusPending}, statusEvent(fin))
		}
	}
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending'
		AND send_after > now() + interval '59 minutes' AND last_error = 'deferred: 451 try later' AND locked_until IS NULL`, ids[0]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'
		AND payload->'data'->>'error_reason' = 'deferred'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
	again, err := sc.Store.ClaimMails(ctx, claimParams(2))
	require.NoError(t, err)
	require.Empty(t, again, "a backed-off row is not due, a cancelled one never")
}

func TestExpiredSendsListsStartedAndCancelledRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 5, "o")
	// 0: send started, expired; 1: never started, cancel requested,
	// expired; 2: never started, expired (a claim takes it); 3: started,
	// live lease; 4: pending.
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 3, locked_until = now() - interval '1 second' WHERE id = ANY($1)`, ids[:3])
	sc.Exec(t, `UPDATE mail SET send_started_at = now() - interval '1 minute', sends = 2, ambiguous = 1 WHERE id = $1`, ids[0])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[1])
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, send_started_at = now(), locked_until = now() + interval '1 hour' WHERE id = $1`, ids[3])

	got, err := sc.Store.ExpiredSends(ctx, 100)
	require.NoError(t, err)
	require.Len(t, got, 2)
	byID := map[int64]store.ExpiredSend{got[0].ID: got[0], got[1].ID: got[1]}
	require.Equal(t, store.ExpiredSend{Fence: store.Fence{ID: ids[0], Token: 3}, Started: true, Sends: 2, Ambiguous: 1,
		Template: "order_confirmed", FirstAttemptAt: byID[ids[0]].FirstAttemptAt}, byID[ids[0]])
	require.True(t, byID[ids[1]].CancelRequested)
	require.False(t, byID[ids[1]].Started)
	one, err := sc.Store.ExpiredSends(ctx, 1)
	require.NoError(t, err)
	require.Len(t, one, 1, "the batch bound holds")
}

func TestSettleIsFencedAndALateAnswerStillLands(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 2, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(2))
	require.NoError(t, err)
	fences := []store.Fence{got[0].Fence, got[1].Fence}
	started, err := sc.Store.MarkStarted(ctx, fences, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Len(t, started, 2)
	settle := store.Outcome{Status: mailtype.StatusPending, IfCancelRequested: mailtype.StatusUnknown, RetryAfter: time.Hour,
		ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonLeaseExpired, Ambiguous: true}

	// A live lease is not settled.
	res, err := sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: fences[0], Outcome: settle, Settle: true}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, store.ErrLeaseLost)

	// Both leases expire (the owner lost the database); the janitor settles.
	sc.Exec(t, `UPDATE mail SET locked_until = now() - interval '1 second'`)
	res, err = sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: fences[0], Outcome: settle, Settle: true},
		{Fence: fences[1], Outcome: settle, Settle: true}})
	require.NoError(t, err)
	require.Equal(t, mailtype.StatusPending, res[0].Status)
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'pending' AND ambiguous = 1 AND attempts = 1
		AND send_after > now() + interval '59 minutes'`))

	// The owner comes back: the provider's answer lands, since no claim
	// took the row since. A transient verdict does not.
	res, err = sc.Store.FinishAttempts(ctx, []store.Attempt{
		{Fence: fences[0], Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "250 ok"}},
		{Fence: fences[1], Outcome: store.Outcome{Status: mailtype.StatusPending, ErrorClass: mailtype.Transient}}})
	require.NoError(t, err)
	require.Equal(t, store.Finished{Status: mailtype.StatusSent, Event: mailtype.EmailSent}, statusEvent(res[0].Finished))
	require.ErrorIs(t, res[1].Err, store.ErrLeaseLost)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND sent_at IS NOT NULL`, ids[0]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent' AND payload->'data'->>'attempts' = '1'`))

	// Once a new claim took the row, a late answer is fenced.
	sc.Exec(t, `UPDATE mail SET send_after = now() WHERE id = $1`, ids[1])
	again, err := sc.Store.ClaimMails(ctx, claimParams(2))
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Sends)
	require.Equal(t, 1, again[0].Ambiguous)
	res, err = sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: fences[1], Outcome: store.Outcome{Status: mailtype.StatusSent}}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, store.ErrLeaseLost)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

func TestMarkStartedSkipsCancelledAndReleaseGivesTheSendBack(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 3, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(3))
	require.NoError(t, err)
	byID := map[int64]store.Fence{}
	for _, m := range got {
		byID[m.ID] = m.Fence
	}
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[1])
	started, err := sc.Store.MarkStarted(ctx, []store.Fence{byID[ids[0]], byID[ids[1]], byID[ids[2]]}, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Len(t, started, 2)
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE send_started_at IS NOT NULL AND sends = 1
		AND locked_until > now() + interval '59 minutes'`))
	again, err := sc.Store.MarkStarted(ctx, []store.Fence{byID[ids[0]]}, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Empty(t, again, "a send is marked once per claim")

	release := store.Outcome{Status: mailtype.StatusPending, IfCancelRequested: mailtype.StatusCancelled, Release: true}
	sc.Exec(t, `UPDATE mail SET last_error = 'deferred: 451 earlier', provider = 'smtp' WHERE id = $1`, ids[2])
	res, err := sc.Store.FinishAttempts(ctx, []store.Attempt{{Fence: byID[ids[1]], Outcome: release}, {Fence: byID[ids[2]], Outcome: release}})
	require.NoError(t, err)
	require.Equal(t, store.Finished{Status: mailtype.StatusCancelled, Event: mailtype.EmailCancelled}, statusEvent(res[0].Finished))
	require.Equal(t, store.Finished{Status: mailtype.StatusPending}, statusEvent(res[1].Finished))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND sends = 0
		AND send_started_at IS NULL AND last_error = 'deferred: 451 earlier' AND provider = 'smtp' AND send_after <= now()`, ids[2]),
		"a released send is given back and the row keeps its history")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'
		AND payload->'data'->>'attempts' = '0'`))
}

// A mark keeps a lease with at least StartLease.Keep left, changing no
// indexed column (the condition for a heap-only update), and renews a
// shorter one; either way it reports what is left.
func TestMarkStartedKeepsALongLeaseAndRenewsAShortOne(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 2, "o")
	got, err := sc.Store.ClaimMails(ctx, store.ClaimParams{Limit: 2, Lease: 10 * time.Minute, Worker: "test"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	byID := map[int64]store.Fence{}
	for _, m := range got {
		byID[m.ID] = m.Fence
	}
	long, short := ids[0], ids[1]
	sc.Exec(t, `UPDATE mail SET locked_until = now() + interval '30 seconds', updated_at = now() - interval '1 minute' WHERE id = $1`, short)
	sc.Exec(t, `UPDATE mail SET updated_at = now() - interval '1 minute' WHERE id = $1`, long)
	before := sc.QueryMap(t, `SELECT id::text, locked_until::text || ' ' || updated_at::text FROM mail`)

	started, err := sc.Store.MarkStarted(ctx, []store.Fence{byID[long], byID[short]}, store.StartLease{Renew: time.Hour, Keep: 5 * time.Minute})
	require.NoError(t, err)
	require.Len(t, started, 2)
	left := map[int64]time.Duration{}
	for _, st := range started {
		left[st.ID] = st.LeaseLeft
	}
	require.Greater(t, left[long], 9*time.Minute)
	require.LessOrEqual(t, left[long], 10*time.Minute)
	require.Equal(t, time.Hour, left[short], "renewed to now() + Renew")

	after := sc.QueryMap(t, `SELECT id::text, locked_until::text || ' ' || updated_at::text FROM mail`)
	require.Equal(t, before[fmt.Sprint(long)], after[fmt.Sprint(long)], "the long lease kept: no indexed column changed")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND locked_until > now() + interval '59 minutes'
		AND updated_at < now() - interval '59 seconds'`, short))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE send_started_at IS NOT NULL AND sends = 1`))
}

func TestDeleteFinishedKeepsUnknownAndRecentRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 7, "o")
	sc.Exec(t, `UPDATE mail SET status = 'sent', updated_at = now() - interval '15 days' WHERE id = $1`, ids[0])
	sc.Exec(t, `UPDATE mail SET status = 'failed', updated_at = now() - interval '15 days' WHERE id = $1`, ids[1])
	sc.Exec(t, `UPDATE mail SET status = 'cancelled', updated_at = now() - interval '15 days' WHERE id = $1`, ids[2])
	sc.Exec(t, `UPDATE mail SET status = 'unknown', updated_at = now() - interval '15 days' WHERE id = $1`, ids[3])
	sc.Exec(t, `UPDATE mail SET status = 'sent' WHERE id = $1`, ids[4])
	sc.Exec(t, `UPDATE mail SET updated_at = now() - interval '15 days' WHERE id = $1`, ids[5])
	// A tombstone: no event id, no recipient.
	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, updated_at)
		VALUES ('order-confirmed:t', 't', 'order_confirmed', 'cancelled', now() - interval '15 days')`)

	window := 14 * 24 * time.Hour
	var total int64
	for {
		n, err := sc.Store.DeleteFinished(ctx, window, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(2))
		total += n
		if n < 2 {
			break
		}
	}
	require.EqualValues(t, 4, total)
	require.EqualValues(t, 4, sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = ANY($1)`, ids[:3]))
	unknown, err := sc.Store.CountUnknown(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, unknown)
}

func TestClaimPlanScansOnlyRowsWithWorkLeft(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	require.NoError(t, storetest.Seed(ctx, sc.Store, "sent-", mailtype.StatusSent, 50000))
	require.NoError(t, storetest.Seed(ctx, sc.Store, "pending-", mailtype.StatusPending, 500))
	require.NoError(t, storetest.Analyze(ctx, sc.Store))

	plan, err := storetest.ExplainClaim(ctx, sc.Store, claimParams(10))
	require.NoError(t, err)
	// Due rows: an ordered scan of the partial index of pending rows, no
	// sort. Expired leases: an index scan restricted to `sending` rows (the
	// lease index, or the status index when statistics say sending rows are
	// few); both touch only rows with work left.
	require.Contains(t, plan, "Index Scan using mail_pending_lane_due_idx on mail", plan)
	require.True(t, strings.Contains(plan, "Index Scan using mail_sending_lease_idx") ||
		strings.Contains(plan, "Index Cond: (status = 'sending'::text)"), plan)
	// The taken rows are updated through the primary key, never a join
	// that reads the whole table.
	require.Contains(t, plan, "Index Scan using mail_pkey on mail m", plan)
	require.NotContains(t, plan, "Seq Scan on mail", plan)
	require.NotContains(t, plan, "Hash", plan)
	require.NotContains(t, plan, "Bitmap", plan)
}

// The send-started mark and the lease renewal find their rows through
// the primary key in their generic plans, never by scanning the lease
// index, whose dead entries pile up until a vacuum.
func TestMarkAndRenewPlansReadThePrimaryKey(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	// No ANALYZE: a fresh table, as the first plans of a new deployment
	// see it (the lease index looked cheapest then).
	require.NoError(t, storetest.Seed(ctx, sc.Store, "pending-", mailtype.StatusPending, 3000))
	got, err := sc.Store.ClaimMails(ctx, claimParams(100))
	require.NoError(t, err)
	require.Len(t, got, 100)
	mode, err := sc.Store.SettingForTest(ctx, "plan_cache_mode")
	require.NoError(t, err)
	require.Equal(t, "force_generic_plan", mode)

	fs := []store.Fence{got[0].Fence, got[1].Fence}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"mark":  {store.MarkStartedSQL, store.MarkArgs(fs, store.StartLease{Renew: time.Hour, Keep: time.Minute})},
		"renew": {store.RenewManySQL, []any{[]int64{fs[0].ID, fs[1].ID}, []int32{int32(fs[0].Token), int32(fs[1].Token)}, time.Hour}},
	} {
		plan, err := sc.Store.ExplainForTest(ctx, q.sql, q.args...)
		require.NoError(t, err, name)
		require.Contains(t, plan, "mail_pkey", name+"\n"+plan)
		require.NotContains(t, plan, "mail_sending_lease_idx", name+"\n"+plan)
		require.NotContains(t, plan, "Seq Scan", name+"\n"+plan)
	}
}

// The suppression check of the claim probes the list's primary key once
// per taken row, however long the list: never a scan or a hash of it.
func TestClaimPlanProbesTheSuppressionListPerRow(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	require.NoError(t, storetest.Seed(ctx, sc.Store, "pending-", mailtype.StatusPending, 500))
	sc.Exec(t, `INSERT INTO suppression (address, reason, source)
SELECT 'gone' || g || '@example.com', 'bounce', 'webhook/bounce' FROM generate_series(1, 50000) g`)
	require.NoError(t, storetest.Analyze(ctx, sc.Store))

	plan, err := storetest.ExplainClaim(ctx, sc.Store, claimParams(50))
	require.NoError(t, err)
	require.Contains(t, plan, "Index Only Scan using suppression_active_idx on suppression s", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	require.NotContains(t, plan, "Hash", plan)
}

func TestFinishAttemptsWritesEachRowByItsOwnFence(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	insertMails(t, sc.Store, 3, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(3))
	require.NoError(t, err)
	require.Len(t, got, 3)
	stale := got[2].Fence
	stale.Token++

	res, err := sc.Store.FinishAttempts(ctx, []store.Attempt{
		{Fence: got[0].Fence, Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"}},
		{Fence: got[1].Fence, Outcome: store.Outcome{Status: mailtype.StatusPending, RetryAfter: time.Minute,
			ErrorClass: mailtype.Transient, ErrorReason: mailtype.ReasonDeferred}},
		{Fence: stale, Outcome: store.Outcome{Status: mailtype.StatusFailed}},
	})
	require.NoError(t, err)
	require.Equal(t, []store.AttemptResult{
		{Finished: store.Finished{Status: mailtype.StatusSent, Event: mailtype.EmailSent}},
		{Finished: store.Finished{Status: mailtype.StatusPending}},
		{Err: store.ErrLeaseLost},
	}, statusEvents(res))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

func TestRenewLeasesReturnsOnlyHeldRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	insertMails(t, sc.Store, 2, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(2))
	require.NoError(t, err)
	stale := got[1].Fence
	stale.Token--
	renewed, err := sc.Store.RenewLeases(ctx, []store.Fence{got[0].Fence, stale}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []store.Fence{got[0].Fence}, renewed)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE locked_until > now() + interval '59 minutes'`))
}

// TestClaimOfThePreviousVersionFailsOnThisSchema: a replica of the version
// before migration 00050 hands mails over without the send-started mark,
// so on this schema its claim must fail rather than run. Its claim read
// first_attempt_at, which 00050 renamed.
func TestClaimOfThePreviousVersionFailsOnThisSchema(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	insertMails(t, sc.Store, 1, "o")
	_, err := sc.Store.ExecForTest(context.Background(), `UPDATE mail SET status = 'sending', attempts = attempts + 1,
		first_attempt_at = COALESCE(first_attempt_at, now()) WHERE status = 'pending'`)
	require.ErrorContains(t, err, `column "first_attempt_at" does not exist`)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'pending'`))
}

// finishOne records the outcome of one attempt with FinishAttempts and
// returns what was written for it; its error is nil or ErrLeaseLost (a
// database error fails the test).
func finishOne(t *testing.T, st *store.Store, f store.Fence, o store.Outcome) (store.Finished, error) {
	t.Helper()
	res, err := st.FinishAttempts(context.Background(), []store.Attempt{{Fence: f, Outcome: o}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0].Finished, res[0].Err
}

// statusEvent is what most tests compare of a Finished: the status and the
// event written (not the mail's identity, which they know).
func statusEvent(f store.Finished) store.Finished {
	return store.Finished{Status: f.Status, Event: f.Event}
}

// statusEvents is statusEvent of every result.
func statusEvents(rs []store.AttemptResult) []store.AttemptResult {
	out := make([]store.AttemptResult, len(rs))
	for i, r := range rs {
		out[i] = store.AttemptResult{Finished: statusEvent(r.Finished), Err: r.Err}
	}
	return out
}
