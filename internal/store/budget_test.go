package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// `mail reconcile --not-delivered` gives a mail a fresh attempt budget
// (issue 30: each reconciled mail got one more try, and those that met a
// transient answer ended failed, attempts_exhausted): the sends the
// sender counts against sender.max_attempts (Started.Sends, ExpiredSend.Sends)
// start again from the first, and the ambiguous count from zero, while the
// total stays in mail show and in the feedback events' attempts.
func TestReconcileNotDeliveredRenewsTheAttemptBudget(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	c := ctx(t)
	key := seedMail(t, sc, "budget-1", "b1", mailtype.StatusUnknown) // attempts 2, sends 2
	sc.Exec(t, `UPDATE mail SET ambiguous = 2 WHERE dedupe_key = $1`, key)

	res, err := sc.Store.Reconcile(c, key, false)
	require.NoError(t, err)
	require.Equal(t, store.ReconcileResult{Status: mailtype.StatusPending}, res)
	m, err := sc.Store.MailByKey(c, key)
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 2}, []int{m.Attempts, m.Sends, m.ReconciledSends}, "claims, sends, reconciled sends")
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT ambiguous FROM mail WHERE dedupe_key = $1`, key))

	claimed, err := sc.Store.ClaimMails(c, claimParams(1))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 3, claimed[0].Token)
	started, err := sc.Store.MarkStarted(c, []store.Fence{claimed[0].Fence}, store.StartLease{Renew: time.Hour, Keep: time.Hour})
	require.NoError(t, err)
	require.Len(t, started, 1)
	require.Equal(t, []int{1, 3, 0}, []int{started[0].Sends, started[0].TotalSends, started[0].Ambiguous},
		"the first send of the new budget, the third in all, no ambiguous one in the budget")

	// A janitor judging this send after its lease expired counts it the same.
	sc.Exec(t, `UPDATE mail SET locked_until = now() - interval '1 second' WHERE dedupe_key = $1`, key)
	expired, err := sc.Store.ExpiredSends(c, 10)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, []int{1, 0}, []int{expired[0].Sends, expired[0].Ambiguous})
	sc.Exec(t, `UPDATE mail SET locked_until = now() + interval '1 hour' WHERE dedupe_key = $1`, key)

	fin, err := finishOne(t, sc.Store, claimed[0].Fence, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "pm-3"})
	require.NoError(t, err)
	require.Equal(t, 3, fin.Sends, "the feedback's attempts count every send")
	require.Equal(t, `{"attempts": 3}`, queryText(t, sc, `SELECT jsonb_build_object('attempts', payload->'data'->'attempts')::text
		FROM outbox WHERE dedupe_key = $1`, key))
	m, err = sc.Store.MailByKey(c, key)
	require.NoError(t, err)
	require.Equal(t, mailtype.StatusSent, m.Status)
	require.Equal(t, []int{3, 3, 2}, []int{m.Attempts, m.Sends, m.ReconciledSends})

	// A delivered reconcile, and one of a mail never reconciled, leave the
	// budget alone.
	other := seedMail(t, sc, "budget-2", "b2", mailtype.StatusUnknown)
	_, err = sc.Store.Reconcile(c, other, true)
	require.NoError(t, err)
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT budget_base FROM mail WHERE dedupe_key = $1`, other))
}
