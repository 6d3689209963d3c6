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
	return store.ClaimParams{Limit: limit, Lease: time.Minute, Worker: "test", MaxAttempts: 5}
}

func insertMails(t *testing.T, st *store.Store, n int, prefix string) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		id, err := st.InsertPendingForTest(context.Background(), store.TestMail{OrderID: fmt.Sprintf("%s%d", prefix, i)})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

func TestClaimNeverExceedsBatchUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	require.NoError(t, sc.Store.SeedForTest(context.Background(), "k", mailtype.StatusPending, 200))

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
	// 3: expired lease; 4: expired lease, cancel requested; 5: expired lease,
	// attempts exhausted; 6: live lease.
	sc.Exec(t, `UPDATE mail SET send_after = now() + interval '1 hour' WHERE id = $1`, ids[1])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[2])
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 2, locked_until = now() - interval '1 second' WHERE id = ANY($1)`, ids[3:6])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[4])
	sc.Exec(t, `UPDATE mail SET attempts = 5 WHERE id = $1`, ids[5])
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

	// The first worker's late writes change nothing.
	_, err = sc.Store.FinishAttempt(ctx, first[0].Fence, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, sc.Store.RenewLease(ctx, first[0].Fence, time.Hour), store.ErrLeaseLost)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND attempts = 2 AND sent_at IS NULL`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	require.NoError(t, sc.Store.RenewLease(ctx, second[0].Fence, time.Hour))
	fin, err := sc.Store.FinishAttempt(ctx, second[0].Fence, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "250 ok"})
	require.NoError(t, err)
	require.Equal(t, store.Finished{Status: mailtype.StatusSent, Event: mailtype.EmailSent}, fin)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 2 AND sent_at IS NOT NULL AND locked_until IS NULL AND provider_message_id = '250 ok'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent' AND payload->'data'->>'attempts' = '2'`))

	// A finished row cannot be finished again.
	_, err = sc.Store.FinishAttempt(ctx, second[0].Fence, store.Outcome{Status: mailtype.StatusFailed})
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
		fin, err := sc.Store.FinishAttempt(ctx, m.Fence, retry)
		require.NoError(t, err)
		if m.ID == ids[1] {
			require.Equal(t, store.Finished{Status: mailtype.StatusCancelled, Event: mailtype.EmailCancelled}, fin)
		} else {
			require.Equal(t, store.Finished{Status: mailtype.StatusPending}, fin)
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

func TestExpireLeasesEndsExhaustedAndCancelledRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	ids := insertMails(t, sc.Store, 5, "o")
	// 0: exhausted, expired; 1: cancel requested, expired; 2: attempts
	// left, expired (a claim takes it); 3: exhausted, live lease; 4: pending.
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 5, locked_until = now() - interval '1 second' WHERE id = ANY($1)`, ids[:3])
	sc.Exec(t, `UPDATE mail SET cancel_requested = true, attempts = 1 WHERE id = $1`, ids[1])
	sc.Exec(t, `UPDATE mail SET attempts = 2 WHERE id = $1`, ids[2])
	sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 5, locked_until = now() + interval '1 hour' WHERE id = $1`, ids[3])

	n, err := sc.Store.ExpireLeases(ctx, 5, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the batch bound holds")
	n, err = sc.Store.ExpireLeases(ctx, 5, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'failed' AND locked_until IS NULL`, ids[0]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'cancelled'`, ids[1]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sending'`, ids[2]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sending'`, ids[3]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending'`, ids[4]))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed'
		AND payload->'data'->>'error_reason' = 'attempts_exhausted' AND payload->'data'->>'attempts' = '5'`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'`))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
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
	require.NoError(t, sc.Store.SeedForTest(ctx, "sent-", mailtype.StatusSent, 50000))
	require.NoError(t, sc.Store.SeedForTest(ctx, "pending-", mailtype.StatusPending, 500))
	require.NoError(t, sc.Store.AnalyzeForTest(ctx))

	plan, err := sc.Store.ExplainClaimForTest(ctx, claimParams(10))
	require.NoError(t, err)
	// Due rows: an ordered scan of the partial index of pending rows, no
	// sort. Expired leases: an index scan restricted to `sending` rows (the
	// lease index, or the status index when statistics say sending rows are
	// few); both touch only rows with work left.
	require.Contains(t, plan, "Index Scan using mail_pending_due_idx on mail", plan)
	require.True(t, strings.Contains(plan, "Index Scan using mail_sending_lease_idx") ||
		strings.Contains(plan, "Index Cond: (status = 'sending'::text)"), plan)
	// The taken rows are updated through the primary key, never a join
	// that reads the whole table.
	require.Contains(t, plan, "Index Scan using mail_pkey on mail m", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	require.NotContains(t, plan, "Hash", plan)
	require.NotContains(t, plan, "Bitmap", plan)
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
	}, res)
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
