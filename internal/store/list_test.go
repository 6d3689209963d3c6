package store_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func keysOf(ms []store.MailSummary) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.DedupeKey)
	}
	return out
}

func TestListMailsFilters(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for i, age := range []string{"3 hours", "2 hours", "10 minutes"} {
		key := "order-confirmed:u" + string(rune('1'+i))
		seedMail(t, sc, key, "u", mailtype.StatusUnknown)
		sc.Exec(t, `UPDATE mail SET updated_at = now() - $2::interval WHERE dedupe_key = $1`, key, age)
	}
	seedMail(t, sc, "notice:u", "u", mailtype.StatusUnknown)
	sc.Exec(t, `UPDATE mail SET template = 'order_cancelled', updated_at = now() - interval '5 hours' WHERE dedupe_key = 'notice:u'`)
	seedMail(t, sc, "order-confirmed:f", "f", mailtype.StatusFailed)
	seedMail(t, sc, "order-confirmed:s", "s", mailtype.StatusSent)
	list := func(f store.MailFilter) ([]string, bool) {
		t.Helper()
		ms, more, err := sc.Store.ListMails(ctx(t), f)
		require.NoError(t, err)
		return keysOf(ms), more
	}

	got, more := list(store.MailFilter{Status: mailtype.StatusUnknown, Limit: 10})
	require.Equal(t, []string{"notice:u", "order-confirmed:u1", "order-confirmed:u2", "order-confirmed:u3"}, got, "oldest change first")
	require.False(t, more)
	got, more = list(store.MailFilter{Status: mailtype.StatusUnknown, Limit: 2})
	require.Equal(t, []string{"notice:u", "order-confirmed:u1"}, got)
	require.True(t, more, "two more match")
	got, _ = list(store.MailFilter{Status: mailtype.StatusUnknown, OlderThan: time.Hour, Template: "order_confirmed", Limit: 10})
	require.Equal(t, []string{"order-confirmed:u1", "order-confirmed:u2"}, got)
	got, _ = list(store.MailFilter{Status: mailtype.StatusFailed, Limit: 10})
	require.Equal(t, []string{"order-confirmed:f"}, got)
	got, _ = list(store.MailFilter{Status: mailtype.StatusPending, Limit: 10})
	require.Empty(t, got)

	ms, _, err := sc.Store.ListMails(ctx(t), store.MailFilter{Status: mailtype.StatusFailed, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, store.MailSummary{DedupeKey: "order-confirmed:f", OrderID: "f", Template: "order_confirmed",
		Status: mailtype.StatusFailed, Sends: 2, Attempts: 2, Provider: "smtp", ProviderMessageID: "pm-1",
		LastError: "timeout (ambiguous): reset", CreatedAt: ms[0].CreatedAt, UpdatedAt: ms[0].UpdatedAt}, ms[0])

	for _, f := range []store.MailFilter{{Status: mailtype.StatusSent, Limit: 1}, {Status: "x'; DROP TABLE mail; --", Limit: 1},
		{Status: mailtype.StatusUnknown}, {Status: mailtype.StatusUnknown, Limit: 1, OlderThan: -time.Second}} {
		_, _, err := sc.Store.ListMails(ctx(t), f)
		require.Error(t, err, "%+v", f)
	}
}

// The list reads the partial index of its status, never the finished rows.
func TestListMailsReadsOnlyItsStatus(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	require.NoError(t, storetest.Seed(ctx(t), sc.Store, "sent-", mailtype.StatusSent, 20000))
	require.NoError(t, storetest.Analyze(ctx(t), sc.Store))
	for _, st := range store.ListableStatuses {
		plan := strings.Join(sc.QueryStrings(t, `EXPLAIN `+store.ListMailsSQL(string(st)), time.Hour, "", 100), "\n")
		require.NotRegexp(t, regexp.MustCompile(`Seq Scan on mail\b`), plan, st)
	}
}

func TestReconcileDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	key := seedMail(t, sc, "order-confirmed:7", "7", mailtype.StatusUnknown)
	cancelled := seedMail(t, sc, "order-confirmed:8", "8", mailtype.StatusUnknown)
	sc.Exec(t, `UPDATE mail SET cancel_event_id = gen_random_uuid() WHERE dedupe_key = $1`, cancelled)
	before := sc.QueryMap(t, `SELECT dedupe_key, status || updated_at::text FROM mail`)

	for _, c := range []struct {
		key       string
		delivered bool
		want      store.ReconcileResult
	}{
		{key, true, store.ReconcileResult{Status: mailtype.StatusSent, Feedback: mailtype.EmailSent}},
		{key, false, store.ReconcileResult{Status: mailtype.StatusPending}},
		{cancelled, false, store.ReconcileResult{Status: mailtype.StatusCancelled, Feedback: mailtype.EmailCancelled}},
	} {
		got, err := sc.Store.ReconcileDryRun(ctx(t), c.key, c.delivered)
		require.NoError(t, err)
		require.Equal(t, c.want, got, c.key)
	}
	_, err := sc.Store.ReconcileDryRun(ctx(t), "nope", true)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, before, sc.QueryMap(t, `SELECT dedupe_key, status || updated_at::text FROM mail`), "nothing changed")
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	got, err := sc.Store.Reconcile(ctx(t), key, true)
	require.NoError(t, err)
	require.Equal(t, store.ReconcileResult{Status: mailtype.StatusSent, Feedback: mailtype.EmailSent}, got, "the real run does what the dry run said")
	_, err = sc.Store.ReconcileDryRun(ctx(t), key, true)
	var se *store.StateError
	require.ErrorAs(t, err, &se)
	require.Equal(t, mailtype.StatusSent, se.Status)
}
