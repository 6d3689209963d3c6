package store_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// resendAfterHour is the rule of a deployment that takes Resend's webhooks,
// with the default mail.delivery_confirm_after.
var resendAfterHour = store.DeliveryConfirm{Providers: []string{"resend"}, After: time.Hour}

// sentMail inserts a mail of status st sent through provider sentAgo ago
// (an interval, on the database's clock), provider_message_id its key,
// and then runs set (SQL after SET, "" for nothing) on it.
func sentMail(t *testing.T, sc *storetest.Schema, key, template, provider string, st mailtype.Status, sentAgo, set string) {
	t.Helper()
	sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, message_id, status,
		attempts, sends, provider, provider_message_id, sent_at, updated_at)
		VALUES (gen_random_uuid(), $1, $1, $2, 'vi', $1 || '@example.com', '<' || $1 || '@shop.example>', $3, 1, 1,
		$4, $1, now() - $5::interval, now() - $5::interval)`, key, template, string(st), provider, sentAgo)
	if set != "" {
		sc.Exec(t, `UPDATE mail SET `+set+` WHERE dedupe_key = $1`, key)
	}
}

// unconfirmedFixture writes one mail of each case the flag tells apart;
// under resendAfterHour, r-delayed, r-old, r-notice and r-edge (in send
// order) are flagged, the last two within the last hour.
func unconfirmedFixture(t *testing.T, sc *storetest.Schema) {
	t.Helper()
	const confirmed = "order_confirmed"
	sentMail(t, sc, "r-old", confirmed, "resend", mailtype.StatusSent, "3 hours", "")
	sentMail(t, sc, "r-edge", confirmed, "resend", mailtype.StatusSent, "90 minutes", "")
	sentMail(t, sc, "r-notice", "order_cancelled", "resend", mailtype.StatusSent, "100 minutes", "")
	sentMail(t, sc, "r-delayed", confirmed, "resend", mailtype.StatusSent, "5 hours", "delivery_delayed_at = now() - interval '4 hours'")
	sentMail(t, sc, "r-new", confirmed, "resend", mailtype.StatusSent, "10 minutes", "")
	sentMail(t, sc, "r-delivered", confirmed, "resend", mailtype.StatusSent, "3 hours", "delivered_at = now() - interval '179 minutes'")
	sentMail(t, sc, "r-complained", confirmed, "resend", mailtype.StatusSent, "3 hours", "complained_at = now() - interval '2 hours'")
	sentMail(t, sc, "r-bounced", confirmed, "resend", mailtype.StatusFailed, "3 hours", "")
	sentMail(t, sc, "s-old", confirmed, "smtp", mailtype.StatusSent, "3 hours", "")
	seedMail(t, sc, "pending-1", "p1", mailtype.StatusPending)
}

func listUnconfirmed(t *testing.T, st *store.Store, f store.MailFilter) ([]string, bool) {
	t.Helper()
	f.Unconfirmed = true
	if f.Limit == 0 {
		f.Limit = 100
	}
	ms, more, err := st.ListMails(ctx(t), f)
	require.NoError(t, err)
	return keysOf(ms), more
}

// The flag, the list filter, the gauges and the mail view agree on every
// case: sent long enough ago through a provider that reports, with no
// delivery, complaint or bounce; a later report clears it, and reading it
// changes no row and writes no event.
func TestDeliveryUnconfirmed(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	unconfirmedFixture(t, sc)
	st := sc.Open(t, store.Options{DeliveryConfirm: resendAfterHour})
	before := sc.QueryMap(t, `SELECT dedupe_key, status || updated_at::text FROM mail`)

	got, more := listUnconfirmed(t, st, store.MailFilter{})
	require.Equal(t, []string{"r-delayed", "r-old", "r-notice", "r-edge"}, got, "oldest send first")
	require.False(t, more)
	got, more = listUnconfirmed(t, st, store.MailFilter{Limit: 2})
	require.Equal(t, []string{"r-delayed", "r-old"}, got)
	require.True(t, more)
	got, _ = listUnconfirmed(t, st, store.MailFilter{OlderThan: 2 * time.Hour})
	require.Equal(t, []string{"r-delayed", "r-old"}, got, "sent at least 2 h ago")
	got, _ = listUnconfirmed(t, st, store.MailFilter{Template: "order_confirmed"})
	require.Equal(t, []string{"r-delayed", "r-old", "r-edge"}, got)

	stats, err := st.Stats(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"resend": 4}, stats.Unconfirmed)
	require.Equal(t, map[string]int64{"resend": 2}, stats.UnconfirmedRecent, "r-notice and r-edge passed their deadline within the hour")

	flagged := map[string]bool{}
	for _, k := range []string{"r-old", "r-edge", "r-notice", "r-delayed", "r-new", "r-delivered", "r-complained", "r-bounced", "s-old", "pending-1"} {
		m, err := st.MailByKey(ctx(t), k)
		require.NoError(t, err)
		flagged[k] = m.DeliveryUnconfirmed
	}
	require.Equal(t, map[string]bool{"r-old": true, "r-edge": true, "r-notice": true, "r-delayed": true, "r-new": false,
		"r-delivered": false, "r-complained": false, "r-bounced": false, "s-old": false, "pending-1": false}, flagged)
	require.Equal(t, before, sc.QueryMap(t, `SELECT dedupe_key, status || updated_at::text FROM mail`), "reading the flag changes no row")
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`), "and writes no event")

	// Late reports: a delivery clears r-old, a bounce fails r-edge.
	at := time.Now().UTC().Truncate(time.Second)
	_, err = st.RecordWebhook(ctx(t), store.Webhook{Provider: "resend", ID: "msg_d", Type: "email.delivered", At: at,
		EmailID: "r-old", Effect: store.EffectDelivered})
	require.NoError(t, err)
	_, err = st.RecordWebhook(ctx(t), store.Webhook{Provider: "resend", ID: "msg_b", Type: "email.bounced", At: at,
		EmailID: "r-edge", Effect: store.EffectBounced, BounceType: store.BounceTransient, Reason: "transient bounce"})
	require.NoError(t, err)
	got, _ = listUnconfirmed(t, st, store.MailFilter{})
	require.Equal(t, []string{"r-delayed", "r-notice"}, got)
	stats, err = st.Stats(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"resend": 2}, stats.Unconfirmed)
	require.Equal(t, map[string]int64{"resend": 1}, stats.UnconfirmedRecent)
	m, err := st.MailByKey(ctx(t), "r-old")
	require.NoError(t, err)
	require.False(t, m.DeliveryUnconfirmed)
	require.Equal(t, mailtype.StatusSent, m.Status)
}

// Only the providers of the rule are checked; a rule that flags nothing
// lists nothing, refuses the filter and counts nothing.
func TestDeliveryUnconfirmedByRule(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	unconfirmedFixture(t, sc)

	both := sc.Open(t, store.Options{DeliveryConfirm: store.DeliveryConfirm{Providers: []string{"smtp", "resend"}, After: time.Hour}})
	stats, err := both.Stats(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"resend": 4, "smtp": 1}, stats.Unconfirmed)
	got, _ := listUnconfirmed(t, both, store.MailFilter{})
	require.Equal(t, []string{"r-delayed", "r-old", "s-old", "r-notice", "r-edge"}, got)

	later := sc.Open(t, store.Options{DeliveryConfirm: store.DeliveryConfirm{Providers: []string{"resend"}, After: 4 * time.Hour}})
	got, _ = listUnconfirmed(t, later, store.MailFilter{})
	require.Equal(t, []string{"r-delayed"}, got)
	stats, err = later.Stats(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"resend": 1}, stats.Unconfirmed)
	require.Equal(t, map[string]int64{"resend": 0}, stats.UnconfirmedRecent, "its deadline passed an hour ago")

	for _, rule := range []store.DeliveryConfirm{{}, {Providers: []string{"resend"}}, {After: time.Hour}} {
		off := sc.Open(t, store.Options{DeliveryConfirm: rule})
		_, _, err := off.ListMails(ctx(t), store.MailFilter{Unconfirmed: true, Limit: 10})
		require.ErrorIs(t, err, store.ErrUnconfirmedOff, "%+v", rule)
		stats, err := off.Stats(ctx(t))
		require.NoError(t, err)
		require.Empty(t, stats.Unconfirmed, "%+v", rule)
		m, err := off.MailByKey(ctx(t), "r-old")
		require.NoError(t, err)
		require.False(t, m.DeliveryUnconfirmed, "%+v", rule)
	}
	_, _, err = both.ListMails(ctx(t), store.MailFilter{Unconfirmed: true, Status: mailtype.StatusSent, Limit: 10})
	require.ErrorContains(t, err, "give a status or unconfirmed, not both")
}

// The list of unconfirmed mails reads mail_unconfirmed_idx, with the
// generic plan the store's sessions use, never the table's sent rows.
func TestListUnconfirmedReadsItsIndex(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	require.NoError(t, storetest.Seed(ctx(t), sc.Store, "sent-", mailtype.StatusSent, 20000))
	sc.Exec(t, `UPDATE mail SET provider = CASE WHEN id % 2 = 0 THEN 'smtp' ELSE 'resend' END,
		delivered_at = CASE WHEN id % 2 = 1 THEN now() END`)
	require.NoError(t, storetest.Analyze(ctx(t), sc.Store))
	plan, err := sc.Store.ExplainForTest(ctx(t), store.ListUnconfirmedSQL, time.Duration(0), "", 101, []string{"resend"}, time.Hour)
	require.NoError(t, err)
	require.NotRegexp(t, regexp.MustCompile(`Seq Scan on mail\b`), plan)
	require.Contains(t, plan, "mail_unconfirmed_idx", plan)
}
