package store_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// unknownBy writes a mail for order to `to` and records its one send
// through provider as ambiguous and unknown (its answer was lost), as the
// sender does under sender.ambiguous_policy unknown. It returns the mail's
// id and its report tag (mailtype.ReportTag).
func unknownBy(t *testing.T, st *store.Store, order, to, provider string) (int64, string) {
	t.Helper()
	ctx := testCtx(t)
	key := mailtype.IdempotencyKey("shop-a", "order-confirmed:"+order)
	id, err := storetest.InsertPending(ctx, st, storetest.Mail{OrderID: order, ToEmail: to,
		From: "orders@shop.example", IdempotencyKey: key})
	require.NoError(t, err)
	got, err := st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err := st.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence, Outcome: store.Outcome{
		Status: mailtype.StatusUnknown, Provider: provider, ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonTimeout,
		Error: "the reply to the message data was lost", Ambiguous: true}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, mailtype.StatusUnknown, res[0].Status)
	return id, mailtype.ReportTag(id, key)
}

// eventsOf returns the events of order in the order they were written,
// each as "TYPE status reconciled_by provider_event.type
// provider_event.webhook_id", every payload checked against the schemas.
func eventsOf(t *testing.T, sc *storetest.Schema, order string) []string {
	t.Helper()
	for _, p := range sc.QueryStrings(t, `SELECT event_type || ' ' || payload::text FROM outbox WHERE order_id = $1 ORDER BY id`, order) {
		typ, payload, _ := strings.Cut(p, " ")
		require.Empty(t, api.ValidateFeedback(typ, []byte(payload)), "%s %s", typ, payload)
	}
	return sc.QueryStrings(t, `SELECT concat_ws(' ', event_type, payload#>>'{data,status}', payload#>>'{data,reconciled_by}',
		payload#>>'{data,provider_event,type}', payload#>>'{data,provider_event,webhook_id}') FROM outbox WHERE order_id = $1 ORDER BY id`, order)
}

// A report that names an unknown mail settles it without an operator:
// the mail becomes sent with an EmailSent marked reconciled_by
// provider_evidence, then the report acts as on any sent mail. Resend's
// reports name it by its report tag (it never got an email id), SMTP
// reports by the VERP mail id. A delay, an unreadable report, a tag of
// another deployment's mail, and a report of another provider settle
// nothing; a report while the send is being written is asked again.
func TestUnknownSettledByProviderEvidence(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{URL: sc.URL, MaxConns: 4})
	ctx := testCtx(t)
	at := time.Date(2026, 9, 18, 8, 0, 4, 126e6, time.UTC)
	const unk = "EmailUnknown unknown"
	for i, c := range []struct {
		name, provider string
		w              store.Webhook
		status         string
		events         []string
	}{
		{"resend delivered", "resend", store.Webhook{Type: "email.delivered", EmailID: "em_1", Effect: store.EffectDelivered},
			"sent", []string{unk, "EmailSent sent provider_evidence email.delivered w1", "EmailDelivered sent provider_evidence email.delivered w1"}},
		{"resend permanent bounce", "resend", store.Webhook{Type: "email.bounced", EmailID: "em_2", Effect: store.EffectBounced,
			BounceType: store.BouncePermanent, BounceSubtype: "General", Reason: "permanent bounce General: 550 5.1.1"},
			"failed", []string{unk, "EmailSent sent provider_evidence email.bounced w2", "EmailBounced failed provider_evidence email.bounced w2"}},
		{"resend failed", "resend", store.Webhook{Type: "email.failed", EmailID: "em_3", Effect: store.EffectFailed,
			ProviderReason: "reached_daily_quota", Reason: "the provider did not send the mail: reached_daily_quota"},
			"failed", []string{unk, "EmailSent sent provider_evidence email.failed w3", "EmailFailed failed provider_evidence email.failed w3"}},
		{"resend complained", "resend", store.Webhook{Type: "email.complained", EmailID: "em_4", Effect: store.EffectComplained, Reason: "spam"},
			"sent", []string{unk, "EmailSent sent provider_evidence email.complained w4", "EmailComplained sent provider_evidence email.complained w4"}},
		{"resend delayed", "resend", store.Webhook{Type: "email.delivery_delayed", EmailID: "em_5", Effect: store.EffectDelayed},
			"unknown", []string{unk}},
		{"smtp success DSN", "smtp", store.Webhook{Type: "email.delivered", Effect: store.EffectDelivered},
			"sent", []string{unk, "EmailSent sent provider_evidence email.delivered w6", "EmailDelivered sent provider_evidence email.delivered w6"}},
		{"smtp failure DSN", "smtp", store.Webhook{Type: "email.bounced", Effect: store.EffectBounced, BounceType: store.BouncePermanent,
			BounceSubtype: "5.1.1", Reason: "permanent bounce 5.1.1: user unknown"},
			"failed", []string{unk, "EmailSent sent provider_evidence email.bounced w7", "EmailBounced failed provider_evidence email.bounced w7"}},
		{"smtp unreadable report", "smtp", store.Webhook{Type: "email.bounced", Effect: store.EffectBounced, BounceType: store.BounceUndetermined,
			Reason: "undetermined bounce: the report gives no status"}, "unknown", []string{unk}},
		{"smtp delay DSN", "smtp", store.Webhook{Type: "email.delivery_delayed", Effect: store.EffectDelayed}, "unknown", []string{unk}},
	} {
		order := fmt.Sprint(i + 1)
		id, tag := unknownBy(t, st, order, "cust"+order+"@example.com", c.provider)
		w := c.w
		w.Provider, w.At, w.ID = c.provider, at, "w"+order
		if c.provider == "smtp" {
			w.MailID = id
		} else {
			w.MailTag = tag
		}
		res, err := st.RecordWebhook(ctx, w)
		require.NoError(t, err, c.name)
		require.Equal(t, 1, res.Matched, c.name)
		require.Equal(t, []string{c.status}, sc.QueryStrings(t, `SELECT status FROM mail WHERE id = $1`, id), c.name)
		require.Equal(t, c.events, eventsOf(t, sc, order), c.name)
		settled := c.status != "unknown"
		require.Equal(t, map[bool]int{true: 1}[settled], res.Reconciled, c.name)
		require.EqualValues(t, map[bool]int64{true: 1}[settled], sc.QueryInt(t, `SELECT count(*) FROM mail WHERE id = $1
			AND reconciled_by = 'provider_evidence' AND reconciled_at IS NOT NULL AND evidence_type = $2 AND evidence_id = $3
			AND evidence_at = $4 AND sent_at IS NOT NULL AND provider_message_id IS NOT DISTINCT FROM NULLIF($5, '')`,
			id, w.Type, w.ID, at, w.EmailID), c.name)
		again, err := st.RecordWebhook(ctx, w)
		require.NoError(t, err)
		require.Equal(t, store.WebhookResult{Duplicate: true}, again, "%s: a redelivery changes nothing", c.name)
	}
	require.Equal(t, map[string]string{"cust2@example.com": "webhook/bounce", "cust4@example.com": "webhook/complaint",
		"cust7@example.com": "dsn/bounce"}, sc.QueryMap(t, `SELECT address, source FROM suppression`))

	view, err := st.MailByKey(ctx, "order-confirmed:1")
	require.NoError(t, err)
	require.NotNil(t, view.Reconciliation)
	require.Equal(t, store.Reconciliation{By: store.ReconciledByEvidence, At: view.Reconciliation.At,
		EvidenceType: "email.delivered", EvidenceID: "w1", EvidenceAt: view.Reconciliation.EvidenceAt}, *view.Reconciliation)
	require.True(t, at.Equal(view.Reconciliation.EvidenceAt), "%s", view.Reconciliation.EvidenceAt)
	view, err = st.MailByKey(ctx, "order-confirmed:5")
	require.NoError(t, err)
	require.Nil(t, view.Reconciliation, "a delay settled nothing")

	// Once settled, Resend's later reports match by the email id the
	// settling report gave: a second delivery report writes nothing.
	res, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "w1b", Type: "email.delivered", At: at.Add(time.Minute),
		EmailID: "em_1", Effect: store.EffectDelivered})
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Matched: 1}, res)
}

// A report tag settles only the mail it was made for, by the provider
// that sent it: a tag made with another deployment's idempotency key, a
// malformed one, and Resend's report of a mail mailsvc sent over SMTP
// match nothing and change nothing. A tag naming a mail whose send is
// still being written is refused for now (ErrReportTooEarly).
func TestReportTagMatchesOnlyItsOwnMail(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{URL: sc.URL, MaxConns: 4})
	ctx := testCtx(t)
	at := time.Date(2026, 9, 18, 8, 0, 4, 0, time.UTC)
	id, _ := unknownBy(t, st, "1", "ann@example.com", "resend")
	smtpID, smtpTag := unknownBy(t, st, "2", "bob@example.com", "smtp")
	delivered := func(wid, tag string) store.Webhook {
		return store.Webhook{Provider: "resend", ID: wid, Type: "email.delivered", At: at, EmailID: "em_" + wid,
			Effect: store.EffectDelivered, MailTag: tag}
	}
	for _, w := range []store.Webhook{
		delivered("other-namespace", mailtype.ReportTag(id, mailtype.IdempotencyKey("shop-b", "order-confirmed:1"))),
		delivered("other-id", mailtype.ReportTag(id+1000, mailtype.IdempotencyKey("shop-a", "order-confirmed:1"))),
		delivered("malformed", fmt.Sprintf("%d-zz", id)),
		delivered("smtp-mail", smtpTag),
	} {
		res, err := st.RecordWebhook(ctx, w)
		require.NoError(t, err, w.ID)
		require.Equal(t, store.WebhookResult{}, res, w.ID)
	}
	require.Equal(t, map[string]string{fmt.Sprint(id): "unknown", fmt.Sprint(smtpID): "unknown"},
		sc.QueryMap(t, `SELECT id::text, status FROM mail`))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM outbox`), "only the two EmailUnknown")

	key := mailtype.IdempotencyKey("shop-a", "order-confirmed:3")
	sending, err := storetest.InsertPending(ctx, st, storetest.Mail{OrderID: "3", From: "orders@shop.example", IdempotencyKey: key})
	require.NoError(t, err)
	claimed, err := st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = st.RecordWebhook(ctx, delivered("early", mailtype.ReportTag(sending, key)))
	require.ErrorIs(t, err, store.ErrReportTooEarly)
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM webhook_event WHERE webhook_id = 'early'`))
}

// Every unknown mail whose outcome its provider reported is settled: a
// batch of unknown mails of both providers, reported in a random order
// (the seed is logged), ends with no unknown mail, each with exactly its
// EmailUnknown, EmailSent and the report's event, in that order.
func TestEveryReportedUnknownIsSettled(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{URL: sc.URL, MaxConns: 4})
	ctx := testCtx(t)
	const n = 24
	var reports []store.Webhook
	for i := range n {
		provider := []string{"resend", "smtp"}[i%2]
		id, tag := unknownBy(t, st, fmt.Sprint(i+1), fmt.Sprintf("c%d@example.com", i), provider)
		w := store.Webhook{Provider: provider, ID: fmt.Sprintf("r%d", i), Type: "email.delivered", At: time.Now().UTC(),
			Effect: store.EffectDelivered, MailTag: tag, EmailID: fmt.Sprintf("em_%d", i)}
		if provider == "smtp" {
			w.MailTag, w.EmailID, w.MailID = "", "", id
		}
		reports = append(reports, w)
	}
	rng.Shuffle(len(reports), func(i, j int) { reports[i], reports[j] = reports[j], reports[i] })
	for _, w := range reports {
		res, err := st.RecordWebhook(ctx, w)
		require.NoError(t, err)
		require.Equal(t, store.WebhookResult{Matched: 1, Reconciled: 1,
			Events: []mailtype.EventType{mailtype.EmailSent, mailtype.EmailDelivered}}, res, w.ID)
	}
	require.Equal(t, map[string]string{"sent": fmt.Sprint(n)}, sc.QueryMap(t, `SELECT status, count(*)::text FROM mail GROUP BY status`))
	require.EqualValues(t, n, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE reconciled_by = 'provider_evidence' AND delivered_at IS NOT NULL`))
	for i := range n {
		require.Equal(t, []string{"EmailUnknown", "EmailSent", "EmailDelivered"},
			typesOf(eventsOf(t, sc, fmt.Sprint(i+1))), "order %d", i+1)
	}
}

func typesOf(events []string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i], _, _ = strings.Cut(e, " ")
	}
	return out
}
