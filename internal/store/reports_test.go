package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Every provider report that says a sent mail was not delivered makes it
// failed with the report's event; only a permanent bounce, a complaint or
// the provider's suppression suppresses, and only the mail's own
// recipient, whatever addresses the report gives.
func TestProviderReportsTellTheTruth(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{})
	ctx := testCtx(t)
	at := time.Date(2026, 9, 18, 8, 0, 4, 0, time.UTC)
	cases := []struct {
		order, to string
		w         store.Webhook
		want      store.WebhookResult
		status    mailtype.Status
	}{
		{"f", "f@example.com", store.Webhook{Type: "email.failed", Effect: store.EffectFailed, ProviderReason: "reached_daily_quota",
			Reason: "the provider did not send the mail: reached_daily_quota"},
			store.WebhookResult{Matched: 1, Events: []mailtype.EventType{mailtype.EmailFailed}}, mailtype.StatusFailed},
		{"s", "s@example.com", store.Webhook{Type: "email.suppressed", Effect: store.EffectSuppressed, ProviderReason: "previous_complaint",
			Reason: "the address is on the provider's suppression list", Recipients: []string{"someone-else@example.com"}},
			store.WebhookResult{Matched: 1, Suppressed: 1, Events: []mailtype.EventType{mailtype.EmailFailed}}, mailtype.StatusFailed},
		{"t", "t@example.com", store.Webhook{Type: "email.bounced", Effect: store.EffectBounced, BounceType: store.BounceTransient,
			BounceSubtype: "MailboxFull", Reason: "transient bounce MailboxFull: full"},
			store.WebhookResult{Matched: 1, Events: []mailtype.EventType{mailtype.EmailBounced}}, mailtype.StatusFailed},
		{"u", "u@example.com", store.Webhook{Type: "email.bounced", Effect: store.EffectBounced, BounceType: store.BounceUndetermined,
			Reason: "undetermined bounce"},
			store.WebhookResult{Matched: 1, Events: []mailtype.EventType{mailtype.EmailBounced}}, mailtype.StatusFailed},
		{"p", "p@example.com", store.Webhook{Type: "email.bounced", Effect: store.EffectBounced, BounceType: store.BouncePermanent,
			Reason: "permanent bounce", Recipients: []string{"victim@example.com"}},
			store.WebhookResult{Matched: 1, Suppressed: 1, Events: []mailtype.EventType{mailtype.EmailBounced}}, mailtype.StatusFailed},
		{"d", "d@example.com", store.Webhook{Type: "email.delivery_delayed", Effect: store.EffectDelayed},
			store.WebhookResult{Matched: 1}, mailtype.StatusSent},
		{"o", "o@example.com", store.Webhook{Type: "email.opened"}, store.WebhookResult{}, mailtype.StatusSent},
	}
	for i, c := range cases {
		sentByResend(t, st, c.order, c.to, "em_"+c.order)
		c.w.Provider, c.w.ID, c.w.At, c.w.EmailID = "resend", "msg_"+c.order, at.Add(time.Duration(i)*time.Second), "em_"+c.order
		res, err := st.RecordWebhook(ctx, c.w)
		require.NoError(t, err, c.order)
		require.Equal(t, c.want, res, c.order)
		require.Equal(t, string(c.status), sc.QueryStrings(t, `SELECT status FROM mail WHERE order_id = $1`, c.order)[0], c.order)
	}
	// A later report on a failed mail changes nothing and publishes no
	// second outcome; a delivery reported after the bounce is recorded only.
	res, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "msg_f2", Type: "email.failed", At: at,
		EmailID: "em_f", Effect: store.EffectFailed, Reason: "again"})
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Matched: 1}, res)
	res, err = st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "msg_p2", Type: "email.delivered", At: at,
		EmailID: "em_p", Effect: store.EffectDelivered})
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Matched: 1}, res)

	require.Equal(t, []string{"p@example.com", "s@example.com"}, sc.QueryStrings(t, `SELECT address FROM suppression ORDER BY 1`))
	require.Equal(t, map[string]string{"complaint": "webhook/complaint", "bounce": "webhook/bounce"},
		sc.QueryMap(t, `SELECT CASE WHEN address = 's@example.com' THEN 'complaint' ELSE 'bounce' END, source FROM suppression`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'd' AND delivery_delayed_at = $1`, at.Add(5*time.Second)))
	require.Equal(t, map[string]string{"f": "permanent the provider did not send the mail: reached_daily_quota",
		"s": "permanent the address is on the provider's suppression list", "t": "permanent transient bounce MailboxFull: full",
		"u": "permanent undetermined bounce", "p": "permanent permanent bounce"},
		sc.QueryMap(t, `SELECT order_id, last_error_class || ' ' || last_error FROM mail WHERE status = 'failed'`))
	require.Equal(t, map[string]string{"f": "EmailFailed provider_failed reached_daily_quota", "s": "EmailFailed suppressed previous_complaint",
		"t": "EmailBounced  transient", "u": "EmailBounced  undetermined", "p": "EmailBounced  permanent"},
		sc.QueryMap(t, `SELECT order_id, concat_ws(' ', event_type, COALESCE(payload#>>'{data,error_reason}', ''),
			COALESCE(payload#>>'{data,provider_event,reason}', payload#>>'{data,provider_event,bounce_type}'))
			FROM outbox WHERE event_type <> 'EmailSent'`))
	for typ, payload := range sc.QueryMap(t, `SELECT event_type || ' ' || order_id, payload::text FROM outbox WHERE event_type <> 'EmailSent'`) {
		require.Empty(t, api.ValidateFeedback(typ[:len(typ)-2], []byte(payload)), "%s %s", typ, payload)
	}
}

// A report for a mail this deployment did not send suppresses nothing
// unless suppression.scope is the whole account.
func TestUnmatchedReportsSuppressOnlyInAccountScope(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	w := store.Webhook{Provider: "resend", Type: "email.bounced", At: time.Now().UTC(), EmailID: "em_someone_elses",
		Effect: store.EffectBounced, BounceType: store.BouncePermanent, Recipients: []string{"x@example.com"}, Reason: "permanent bounce"}
	w.ID = "msg_1"
	res, err := sc.Open(t, store.Options{}).RecordWebhook(ctx, w)
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{}, res)
	w.ID = "msg_2"
	res, err = sc.Open(t, store.Options{AccountSuppression: true}).RecordWebhook(ctx, w)
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Suppressed: 1}, res)
	require.Equal(t, []string{"x@example.com"}, sc.QueryStrings(t, `SELECT address FROM suppression`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

// Transient bounces suppress an address only at the rule's count within
// its window, and only until the expiry; a permanent report makes the
// entry permanent. The history keeps every step.
func TestTransientBouncesSuppressForAWhile(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{Transient: store.TransientRule{Bounces: 3, Window: time.Hour, Expiry: 2 * time.Hour}})
	ctx := testCtx(t)
	bounce := func(order string) store.WebhookResult {
		t.Helper()
		sentByResend(t, st, order, "Full@Example.com", "em_"+order)
		res, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "msg_" + order, Type: "email.bounced", At: time.Now(),
			EmailID: "em_" + order, Effect: store.EffectBounced, BounceType: store.BounceTransient, Reason: "transient bounce MailboxFull: full"})
		require.NoError(t, err)
		return res
	}
	require.Equal(t, 0, bounce("1").Suppressed)
	require.Equal(t, 0, bounce("2").Suppressed)
	require.Equal(t, 1, bounce("3").Suppressed, "the third within the window")
	list, err := st.Suppressions(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, store.SourceTransient, list[0].Source)
	require.Equal(t, "3 transient bounces within 1h0m0s; last: transient bounce MailboxFull: full", list[0].Reason)
	require.NotNil(t, list[0].ExpiresAt)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *list[0].ExpiresAt, time.Minute)
	claimSuppressed := func(order string) bool {
		t.Helper()
		_, err := storetest.InsertPending(ctx, st, storetest.Mail{OrderID: order, ToEmail: "Full@example.com"})
		require.NoError(t, err)
		got, err := st.ClaimMails(ctx, claimParams(1))
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0].Suppressed
	}
	require.True(t, claimSuppressed("4"))

	// Expired, it stops nothing, and is not listed.
	sc.Exec(t, `UPDATE suppression SET expires_at = now() - interval '1 second'`)
	require.False(t, claimSuppressed("5"))
	list, err = st.Suppressions(ctx)
	require.NoError(t, err)
	require.Empty(t, list)

	// An expiring entry that a permanent report names becomes permanent.
	sc.Exec(t, `UPDATE suppression SET expires_at = now() + interval '1 hour'`)
	e, added, err := st.Suppress(ctx, "Full@example.com", "asked by phone", store.SourceOperator)
	require.NoError(t, err)
	require.False(t, added)
	require.Nil(t, e.ExpiresAt)
	require.Equal(t, store.SourceOperator, e.Source)
	h, err := st.SuppressionHistoryOf(ctx, "Full@EXAMPLE.com")
	require.NoError(t, err)
	var kinds []string
	for _, ev := range h.Events {
		kinds = append(kinds, ev.Kind+" "+string(ev.Source))
	}
	require.Equal(t, []string{"transient webhook/transient", "transient webhook/transient", "transient webhook/transient",
		"suppressed webhook/transient", "seen_again operator"}, kinds)
}

// Three transient bounces of one address recorded at once still reach the
// rule's count: they count one after the other.
func TestConcurrentTransientBouncesReachTheCount(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{Transient: store.TransientRule{Bounces: 3, Window: time.Hour, Expiry: time.Hour}})
	ctx := testCtx(t)
	for _, o := range []string{"a", "b", "c"} {
		sentByResend(t, st, o, "busy@example.com", "em_"+o)
	}
	errs := make(chan error, 3)
	for _, o := range []string{"a", "b", "c"} {
		go func() {
			_, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "msg_" + o, Type: "email.bounced", At: time.Now(),
				EmailID: "em_" + o, Effect: store.EffectBounced, BounceType: store.BounceTransient, Reason: "full"})
			errs <- err
		}()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, []string{"busy@example.com webhook/transient"}, sc.QueryStrings(t, `SELECT address || ' ' || source FROM suppression`))
}

// A complaint is published once per mail, however often it is reported;
// an expired entry no longer blocks a resend.
func TestOneComplaintPerMailAndExpiredEntriesBlockNothing(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{})
	ctx := testCtx(t)
	sentByResend(t, st, "c", "spam@example.com", "em_c")
	for _, id := range []string{"msg_1", "msg_2", "msg_3"} {
		_, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: id, Type: "email.complained", At: time.Now(),
			EmailID: "em_c", Effect: store.EffectComplained, Reason: "spam"})
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailComplained'`))
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT seen FROM suppression`))

	sc.Exec(t, `UPDATE suppression SET expires_at = now() - interval '1 second'`)
	sc.Exec(t, `UPDATE mail SET status = 'failed'`)
	_, err := st.Resend(ctx, mailtype.ConfirmationKey("c"), "shop.example", "ns")
	require.NoError(t, err, "an expired entry stops no resend")
}

// A report that comes before the sender recorded its send (the mail is
// still sending) records nothing and asks to be sent again; after the
// outcome it is applied.
func TestReportBeforeTheOutcomeIsRetried(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{})
	ctx := testCtx(t)
	id, err := storetest.InsertPending(ctx, st, storetest.Mail{OrderID: "r", ToEmail: "fast@example.com"})
	require.NoError(t, err)
	got, err := st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, got, 1)
	// As the sender leaves it while the send is in flight: no provider
	// recorded yet (the outcome writes it).
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1 AND provider IS NULL AND status = 'sending'`, id))
	report := store.Webhook{Provider: "smtp", ID: "dsn:r", Type: "email.bounced", At: time.Now(), MailID: id,
		Effect: store.EffectBounced, BounceType: store.BouncePermanent, Reason: "permanent bounce 5.1.1"}
	_, err = st.RecordWebhook(ctx, report)
	require.ErrorIs(t, err, store.ErrReportTooEarly)
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM webhook_event`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM suppression`))

	res, err := st.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence,
		Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "queued"}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	r, err := st.RecordWebhook(ctx, report)
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Matched: 1, Suppressed: 1, Events: []mailtype.EventType{mailtype.EmailBounced}}, r)
	require.Equal(t, "failed", sc.QueryStrings(t, `SELECT status FROM mail`)[0])
}
