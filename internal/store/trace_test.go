package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// The trace context travels with the rows (the store treats it as opaque
// text): ingest stores it on the mail, a claim returns it, an outcome
// writes the send's own context on its feedback event, or the row's when
// the outcome has none (a release, the janitor's verdict), a stale event's
// and a cancel's feedback carry the event's, and the relay fetches it with
// the outbox row. A row without one stays NULL all the way.
func TestTraceContextTravelsWithTheRows(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx, st := testCtx(t), b.sc.Store
	tc := func(span string) string {
		return `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-` + span + `-01"}`
	}
	m1, m2, m3, m4 := confirm("1"), confirm("2"), confirm("3"), confirm("4")
	m1.Mail.TraceContext, m2.Mail.TraceContext = tc("1000000000000001"), tc("2000000000000002")
	stale := confirm("5")
	stale.Mail.Stale, stale.Mail.TraceContext = true, tc("5000000000000005")
	_, err := st.Ingest(ctx, []store.IngestItem{m1, m2, m3, m4, stale})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"1": tc("1000000000000001"), "2": tc("2000000000000002"), "3": "-", "4": "-",
		"5": tc("5000000000000005")}, b.sc.QueryMap(t, `SELECT order_id, COALESCE(trace_context, '-') FROM mail`))

	claimed, err := st.ClaimMails(ctx, claimParams(10))
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	var as []store.Attempt
	for _, m := range claimed {
		want := map[string]string{"1": tc("1000000000000001"), "2": tc("2000000000000002")}[m.OrderID]
		require.Equal(t, want, m.TraceContext, m.OrderID)
		o := store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"}
		switch m.OrderID {
		case "1":
			o.TraceContext = tc("1100000000000011") // the send span
		case "2":
			o = store.Outcome{Status: mailtype.StatusFailed, Provider: "smtp", ErrorClass: mailtype.Permanent,
				ErrorReason: mailtype.ReasonRejected, Error: "550 no"}
		case "4":
			continue
		}
		as = append(as, store.Attempt{Fence: m.Fence, Outcome: o})
	}
	res, err := st.FinishAttempts(ctx, as)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	// Order 6 is pending when its cancel comes: the EmailCancelled is the
	// cancel's, with its context. Order 4 is claimed: the cancel only
	// requests, and its release below reports.
	_, err = st.Ingest(ctx, []store.IngestItem{confirm("6")})
	require.NoError(t, err)
	cancel4, cancel6 := cancelOf("4"), cancelOf("6")
	cancel4.Cancel.TraceContext, cancel6.Cancel.TraceContext = tc("4400000000000044"), tc("6600000000000066")
	_, err = st.Ingest(ctx, []store.IngestItem{cancel4, cancel6})
	require.NoError(t, err)

	want := map[string]string{
		"order-confirmed:1": tc("1100000000000011"), "order-confirmed:2": tc("2000000000000002"),
		"order-confirmed:3": "-", "order-confirmed:5": tc("5000000000000005"), "order-confirmed:6": tc("6600000000000066"),
	}
	require.Equal(t, want, b.sc.QueryMap(t, `SELECT dedupe_key, COALESCE(trace_context, '-') FROM outbox`))
	for _, m := range claimed {
		if m.OrderID != "4" {
			continue
		}
		res, err := st.FinishAttempts(ctx, []store.Attempt{{Fence: m.Fence, Outcome: store.Outcome{
			Status: mailtype.StatusPending, IfCancelRequested: mailtype.StatusCancelled, Release: true}}})
		require.NoError(t, err)
		require.Equal(t, mailtype.EmailCancelled, res[0].Event)
	}
	// The release wrote the EmailCancelled with the row's context (none).
	want["order-confirmed:4"] = "-"
	require.Equal(t, want, b.sc.QueryMap(t, `SELECT dedupe_key, COALESCE(trace_context, '-') FROM outbox`))

	rows, err := b.sess.FetchOutbox(ctx, 10)
	require.NoError(t, err)
	require.Len(t, rows, 6)
	for _, r := range rows {
		w := want[r.DedupeKey]
		if w == "-" {
			w = ""
		}
		require.Equal(t, w, r.TraceContext, r.DedupeKey)
	}
}

// A provider's report (a webhook) carries the mail's stored trace context:
// the EmailDelivered and EmailBounced of a mail continue the trace of the
// event that asked for it; a mail without one writes NULL.
func TestWebhookFeedbackCarriesTheMailsTraceContext(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx, st := testCtx(t), sc.Store
	traced := `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-1000000000000001-01"}`
	m1, m2 := confirm("1"), confirm("2")
	m1.Mail.TraceContext = traced
	_, err := st.Ingest(ctx, []store.IngestItem{m1, m2})
	require.NoError(t, err)
	claimed, err := st.ClaimMails(ctx, claimParams(10))
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	var as []store.Attempt
	for _, m := range claimed {
		as = append(as, store.Attempt{Fence: m.Fence, Outcome: store.Outcome{Status: mailtype.StatusSent,
			Provider: "resend", ProviderMessageID: "em_" + m.OrderID}})
	}
	res, err := st.FinishAttempts(ctx, as)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	at := time.Date(2026, 9, 18, 8, 0, 4, 0, time.UTC)
	for _, w := range []store.Webhook{
		{ID: "msg_d1", Type: "email.delivered", At: at, EmailID: "em_1", Effect: store.EffectDelivered},
		{ID: "msg_b1", Type: "email.bounced", At: at, EmailID: "em_1", Effect: store.EffectBounced,
			Recipients: []string{"b@example.com"}, Reason: "bounce", BounceType: "permanent"},
		{ID: "msg_d2", Type: "email.delivered", At: at, EmailID: "em_2", Effect: store.EffectDelivered},
	} {
		w.Provider = "resend"
		r, err := st.RecordWebhook(ctx, w)
		require.NoError(t, err)
		require.Equal(t, 1, r.Matched, w.ID)
	}
	require.Equal(t, map[string]string{
		"1 EmailSent": traced, "1 EmailDelivered": traced, "1 EmailBounced": traced,
		"2 EmailSent": "-", "2 EmailDelivered": "-",
	}, sc.QueryMap(t, `SELECT order_id || ' ' || event_type, COALESCE(trace_context, '-') FROM outbox`))
}
