package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

// unknownThroughResend writes a mail for order and sends it through the
// Resend provider to the stand-in, which sends it and loses the response;
// the outcome is recorded unknown, as the sender does when no safe resend
// remains (sender.ambiguous_policy unknown). The stand-in keeps the mail
// it sent, with the tags of the request.
func (h *harness) unknownThroughResend(t *testing.T, srv *resendtest.Server, p *resend.Provider, order string) int64 {
	t.Helper()
	ctx := context.Background()
	key := "order-confirmed:" + order
	_, err := storetest.InsertPending(ctx, h.st, storetest.Mail{OrderID: order, ToEmail: "c" + order + "@example.com",
		From: "Shop <orders@shop.example>", IdempotencyKey: mailtype.IdempotencyKey("shop-a", key)})
	require.NoError(t, err)
	got, err := h.st.ClaimMails(ctx, store.ClaimParams{Limit: 1, Lease: time.Minute, Worker: "test"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	m := got[0]
	srv.Inject(resendtest.LoseResponse())
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = p.NewSession().Send(sctx, &sender.Message{ID: m.ID, From: m.From, To: m.ToEmail, Subject: m.Subject,
		Text: m.BodyText, HTML: m.BodyHTML, MessageID: m.MessageID, DedupeKey: m.DedupeKey, IdempotencyKey: m.IdempotencyKey})
	require.Equal(t, mailtype.Ambiguous, mailtype.ClassOf(err), "%v", err)
	res, err := h.st.FinishAttempts(ctx, []store.Attempt{{Fence: m.Fence, Outcome: store.Outcome{
		Status: mailtype.StatusUnknown, Provider: "resend", ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonOf(err),
		Error: mailtype.Sanitize(err.Error()), Ambiguous: true}}})
	require.NoError(t, err)
	require.Equal(t, mailtype.StatusUnknown, res[0].Status)
	return m.ID
}

// The Resend round trip of reconciliation by provider evidence: mails
// whose send response was lost end unknown; the stand-in's signed
// webhooks about them carry their report tag back in data.tags, and each
// settles its mail by what it reports, with the EmailSent marked
// reconciled_by provider_evidence before the report's own event. A
// delay settles nothing until the delivery comes. Resend sent each mail
// exactly once: nothing is sent again.
func TestResendReportSettlesUnknownMail(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	srv := resendtest.New(t, "re_test_key")
	p, err := resend.New(resend.Config{APIKey: "re_test_key", BaseURL: srv.URL})
	require.NoError(t, err)
	ids := map[string]int64{}
	for _, order := range []string{"1", "2", "3", "4"} {
		ids[order] = h.unknownThroughResend(t, srv, p, order)
	}
	sent := srv.Sent()
	require.Len(t, sent, 4)
	now := time.Now()
	post := func(id, typ string, order int, extra map[string]any) {
		t.Helper()
		e := sent[order-1]
		require.Equal(t, mailtype.ReportTag(ids[fmt.Sprint(order)], e.IdempotencyKey),
			e.Tags[mailtype.ReportTagName], "the request carried the mail's report tag")
		body := resendtest.Event(typ, e, now, extra)
		require.Equal(t, reply{Code: http.StatusOK, Result: webhook.ResultProcessed}, h.post(t, signed(t, id, now, body, secret), body), id)
	}
	post("msg_1", "email.delivered", 1, nil)
	post("msg_2", "email.bounced", 2, bounce("Permanent", "General"))
	post("msg_3", "email.failed", 3, map[string]any{"failed": map[string]any{"reason": "reached_daily_quota"}})
	post("msg_4", "email.delivery_delayed", 4, nil)
	require.Equal(t, "unknown", h.sc.QueryMap(t, `SELECT order_id, status FROM mail`)["4"], "a delay settles nothing")
	post("msg_5", "email.delivered", 4, nil)

	require.Equal(t, map[string]string{"1": "sent", "2": "failed", "3": "failed", "4": "sent"},
		h.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	for i, e := range sent {
		order := fmt.Sprint(i + 1)
		require.Equal(t, map[string]string{order: e.ID}, h.sc.QueryMap(t,
			`SELECT order_id, provider_message_id FROM mail WHERE order_id = $1 AND reconciled_by = 'provider_evidence'`, order))
	}
	require.Equal(t, map[string]int{"EmailUnknown": 4, "EmailSent": 4, "EmailDelivered": 2, "EmailBounced": 1, "EmailFailed": 1}, h.published(t))
	want := map[string][]string{
		"1": {"EmailUnknown", "EmailSent provider_evidence msg_1", "EmailDelivered provider_evidence msg_1"},
		"2": {"EmailUnknown", "EmailSent provider_evidence msg_2", "EmailBounced provider_evidence msg_2"},
		"3": {"EmailUnknown", "EmailSent provider_evidence msg_3", "EmailFailed provider_evidence msg_3"},
		"4": {"EmailUnknown", "EmailSent provider_evidence msg_5", "EmailDelivered provider_evidence msg_5"},
	}
	for order, events := range want {
		require.Equal(t, events, h.sc.QueryStrings(t, `SELECT concat_ws(' ', event_type, payload#>>'{data,reconciled_by}',
			payload#>>'{data,provider_event,webhook_id}') FROM outbox WHERE order_id = $1 ORDER BY id`, order), order)
	}
	require.Len(t, srv.Sent(), 4, "no mail was sent again")
	require.Len(t, srv.Requests(), 4)
	require.Equal(t, 1, h.reported(t, "bounced_permanent true"))
}
