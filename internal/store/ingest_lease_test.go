package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

var testLease = store.IngestLease{Max: 2, Lease: time.Minute, Worker: "w-1"}

// enveloped is confirm(orderID) with the envelope a consumer writes (a
// row without From is a legacy row, never leased).
func enveloped(orderID string) store.IngestItem {
	it := confirm(orderID)
	it.Mail.From, it.Mail.ToName, it.Mail.IdempotencyKey = "Shop <shop@example.com>", "Bé", "ns/"+orderID
	return it
}

// comparable is c without what differs between two writes of the same
// mail: its id and the database's instants.
func comparable(c store.ClaimedMail) store.ClaimedMail {
	c.ID, c.CreatedAt, c.FirstAttemptAt, c.LockedUntil = 0, time.Time{}, time.Time{}, time.Time{}
	c.OccurredAt = c.OccurredAt.UTC()
	return c
}

// TestIngestLeasedHandsRowsAsAClaimWould: an insert that leases leases at
// most Max mails, in order, as a claim would (status, token 1, lease,
// worker, first claim), and returns each as the claim of the same row
// returns it; the rest stay pending for a claim.
func TestIngestLeasedHandsRowsAsAClaimWould(t *testing.T) {
	t.Parallel()
	items := []store.IngestItem{enveloped("1"), enveloped("2"), enveloped("3")}
	sc := storetest.New(t)
	res, leased, err := sc.Store.IngestLeased(testCtx(t), items, testLease)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, []bool{res[0].Leased, res[1].Leased, res[2].Leased})
	for _, r := range res {
		require.Equal(t, mailtype.DispositionInserted, r.Disposition)
	}
	require.Len(t, leased, 2)
	require.Equal(t, map[string]string{"1": "sending", "2": "sending", "3": "pending"},
		sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND attempts = 1
		AND locked_by = 'w-1' AND locked_until > now() + interval '50 seconds' AND first_claimed_at IS NOT NULL`))

	// The same events written without a lease, then claimed.
	ref := storetest.New(t)
	_, err = ref.Store.Ingest(testCtx(t), items)
	require.NoError(t, err)
	claimed, err := ref.Store.ClaimMails(testCtx(t), store.ClaimParams{Limit: 3, Lease: time.Minute, Worker: "w-1"})
	require.NoError(t, err)
	byKey := map[string]store.ClaimedMail{}
	for _, c := range claimed {
		byKey[c.DedupeKey] = comparable(c)
	}
	for _, l := range leased {
		require.Equal(t, byKey[l.DedupeKey], comparable(l))
		require.Equal(t, 1, l.Token)
	}
	rest, err := sc.Store.ClaimMails(testCtx(t), store.ClaimParams{Limit: 3, Lease: time.Minute, Worker: "w-2"})
	require.NoError(t, err)
	require.Len(t, rest, 1, "a claim takes the row left pending, never a leased one")
	require.Equal(t, "3", rest[0].OrderID)
}

// TestIngestLeasedLeavesWhatAClaimWouldNotTake: a mail over the
// per-recipient limit is held, one with attachments waits for them, a
// batch with a cancel or a stale mail leases nothing, and a suppressed
// recipient's mail is leased with Suppressed set (never sent).
func TestIngestLeasedLeavesWhatAClaimWouldNotTake(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{RecipientLimit: store.RecipientLimit{Mails: 1, Window: time.Hour}})
	att := enveloped("3")
	att.Mail.HasAttachments, att.Mail.ToEmail = true, "c@example.com"
	res, leased, err := st.IngestLeased(testCtx(t), []store.IngestItem{enveloped("1"), enveloped("2"), att}, store.IngestLease{Max: 3, Lease: time.Minute, Worker: "w"})
	require.NoError(t, err)
	require.Len(t, leased, 1)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionHeld, mailtype.DispositionInserted},
		[]mailtype.Disposition{res[0].Disposition, res[1].Disposition, res[2].Disposition})
	require.Equal(t, map[string]string{"1": "sending", "2": "held", "3": "pending"}, sc.QueryMap(t, `SELECT order_id, status FROM mail`))

	_, leased, err = sc.Store.IngestLeased(testCtx(t), []store.IngestItem{enveloped("4"), cancelOf("9")}, testLease)
	require.NoError(t, err)
	require.Empty(t, leased)
	require.Equal(t, "pending", sc.QueryMap(t, `SELECT order_id, status FROM mail`)["4"])

	fresh := storetest.New(t) // order 4 above is due: nothing is leased behind it
	fresh.Exec(t, `INSERT INTO suppression (address, reason, source) VALUES ('b@example.com', 'bounced', 'operator')`)
	_, leased, err = fresh.Store.IngestLeased(testCtx(t), []store.IngestItem{enveloped("5")}, testLease)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	require.True(t, leased[0].Suppressed)
}

// TestLeasedRowOfADeadProcessIsReclaimedSilently: a leased row whose
// process died before it started the send is taken by a claim once its
// lease expired, as reclaimed (nothing was sent, no attempt spent), with
// the next fencing token.
func TestLeasedRowOfADeadProcessIsReclaimedSilently(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	_, leased, err := sc.Store.IngestLeased(testCtx(t), []store.IngestItem{enveloped("1")}, testLease)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	got, err := sc.Store.ClaimMails(testCtx(t), store.ClaimParams{Limit: 5, Lease: time.Minute, Worker: "w-2"})
	require.NoError(t, err)
	require.Empty(t, got, "the lease holds")
	require.NoError(t, storetest.SetLeaseLeft(testCtx(t), sc.Store, []int64{leased[0].ID}, -time.Second))
	got, err = sc.Store.ClaimMails(testCtx(t), store.ClaimParams{Limit: 5, Lease: time.Minute, Worker: "w-2"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Reclaimed)
	require.Equal(t, 2, got[0].Token)
	require.Equal(t, 0, got[0].Sends)
}

// TestIngestLeasesNothingWhileAnOlderRowIsDue: a row a claim would take
// (a due pending row of either lane, an expired lease whose send never
// started) goes before any new mail: the insert then writes its mails
// pending, for the claim to take in order. A pending row not due yet does
// not stop it (found by a tester: a release by another process was
// passed by a fresh mail).
func TestIngestLeasesNothingWhileAnOlderRowIsDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, older string
		leased      int
	}{
		{"a due bulk row", `UPDATE mail SET send_after = now() - interval '1 second'`, 0},
		{"a due priority row", `UPDATE mail SET lane = 1, send_after = now() - interval '1 second'`, 0},
		{"an expired unstarted claim", `UPDATE mail SET status = 'sending', attempts = 1, locked_until = now() - interval '1 second'`, 0},
		{"a retry not due yet", `UPDATE mail SET send_after = now() + interval '1 hour'`, 1},
		{"an expired claim whose send started (the janitor's)", `UPDATE mail SET status = 'sending', attempts = 1,
			locked_until = now() - interval '1 second', send_started_at = now(), sends = 1`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			_, err := sc.Store.Ingest(testCtx(t), []store.IngestItem{enveloped("old")})
			require.NoError(t, err)
			sc.Exec(t, tc.older)
			res, leased, err := sc.Store.IngestLeased(testCtx(t), []store.IngestItem{enveloped("new")}, testLease)
			require.NoError(t, err)
			require.Len(t, leased, tc.leased)
			require.Equal(t, tc.leased == 1, res[0].Leased)
			want := map[bool]string{true: "sending", false: "pending"}[tc.leased == 1]
			require.Equal(t, want, sc.QueryMap(t, `SELECT order_id, status FROM mail`)["new"])
		})
	}
}
