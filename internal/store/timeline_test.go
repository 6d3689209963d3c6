package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// timelineBundle drives mails through the store's own writes (claim,
// send-started mark, outcome, webhook) and reads their timelines.
type timelineBundle struct {
	sc *storetest.Schema
	st *store.Store
}

func setupTimeline(t *testing.T) timelineBundle {
	t.Helper()
	sc := storetest.New(t)
	return timelineBundle{sc: sc, st: sc.Store}
}

// send claims the one due mail, marks its send started and writes o.
func (b timelineBundle) send(t *testing.T, o store.Outcome) {
	t.Helper()
	ctx := testCtx(t)
	got, err := b.st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = b.st.MarkStarted(ctx, []store.Fence{got[0].Fence}, store.StartLease{Renew: time.Minute})
	require.NoError(t, err)
	res, err := b.st.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence, Outcome: o}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

// report records a webhook of Resend about email id em, at the
// provider's time at.
func (b timelineBundle) report(t *testing.T, w store.Webhook) {
	t.Helper()
	w.Provider = "resend"
	_, err := b.st.RecordWebhook(testCtx(t), w)
	require.NoError(t, err)
}

func (b timelineBundle) timeline(t *testing.T, key string) []store.TimelineEntry {
	t.Helper()
	got, err := b.st.MailTimeline(testCtx(t), key)
	require.NoError(t, err)
	return got
}

// view reads the mail as `mail show` does: the times and ids the
// expected entries are made of.
func (b timelineBundle) view(t *testing.T, key string) store.MailView {
	t.Helper()
	v, err := b.st.MailByKey(testCtx(t), key)
	require.NoError(t, err)
	return v
}

// ts reads one timestamp with the query q.
func (b timelineBundle) ts(t *testing.T, q string, args ...any) time.Time {
	t.Helper()
	return time.UnixMicro(b.sc.QueryInt(t, `SELECT (extract(epoch FROM (`+q+`)) * 1000000)::bigint`, args...))
}

func entry(at time.Time, kind store.TimelineKind, summary string, kv ...string) store.TimelineEntry {
	d := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		d[kv[i]] = kv[i+1]
	}
	return store.TimelineEntry{At: at, Kind: kind, Summary: summary, Detail: d}
}

// received is the entry of an input event of order (template
// order_confirmed, revision 1).
func received(v store.MailView) store.TimelineEntry {
	return entry(v.CreatedAt, store.TimelineReceived, "input event received", "event_id", v.EventID,
		"occurred_at", rfc(*v.OccurredAt), "order_id", v.OrderID, "revision", "1", "template", "order_confirmed")
}

// published is the entry of the publication of f (written only, when it
// was not published).
func published(f store.FeedbackView, routingKey string) store.TimelineEntry {
	kv := []string{"event_id", f.EventID, "routing_key", routingKey, "written_at", rfc(f.CreatedAt),
		"publish_attempts", "0"}
	if f.PublishedAt != nil {
		kv[len(kv)-1] = "1"
		return entry(*f.PublishedAt, store.TimelineFeedback, string(f.EventType)+" published as "+routingKey, kv...)
	}
	return entry(f.CreatedAt, store.TimelineFeedback, string(f.EventType)+" written, not published yet", kv...)
}

// requireTimeline compares the timeline of key with want, times by
// instant.
func (b timelineBundle) requireTimeline(t *testing.T, key string, want []store.TimelineEntry) {
	t.Helper()
	got := b.timeline(t, key)
	require.Len(t, got, len(want))
	for i := range got {
		require.True(t, want[i].At.Equal(got[i].At), "entry %d %q at %s, want %s", i, got[i].Summary, got[i].At, want[i].At)
		want[i].At = got[i].At
	}
	require.Equal(t, want, got)
}

func rfc(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }

func TestTimelineOfASentAndDeliveredMail(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "1", ToEmail: "a@example.com"})
	require.NoError(t, err)
	b.send(t, store.Outcome{Status: mailtype.StatusSent, Provider: "resend", ProviderMessageID: "em_1"})
	at := time.Now().Truncate(time.Microsecond)
	b.report(t, store.Webhook{ID: "w1", Type: "email.delivered", EmailID: "em_1", Effect: store.EffectDelivered, At: at})
	b.sc.Exec(t, `UPDATE outbox SET published_at = created_at + interval '1 second', attempts = 1`)

	v := b.view(t, "order-confirmed:1")
	require.Len(t, v.Feedback, 2)
	b.requireTimeline(t, v.DedupeKey, []store.TimelineEntry{
		received(v),
		entry(*v.FirstAttemptAt, store.TimelineAttempt, "first claimed for sending", "claims", "1", "sends", "1"),
		entry(b.ts(t, `SELECT send_started_at FROM mail`), store.TimelineAttempt, "send 1: resend accepted the mail as em_1",
			"accepted_at", rfc(*v.SentAt), "provider", "resend", "provider_message_id", "em_1", "send", "1"),
		entry(v.Feedback[0].CreatedAt, store.TimelineOutcome, "sent: resend accepted the mail as em_1",
			"provider", "resend", "provider_message_id", "em_1", "sends", "1"),
		entry(at, store.TimelineReport, "resend reported email.delivered", "type", "email.delivered", "webhook_id", "w1",
			"events", "EmailDelivered"),
		published(v.Feedback[0], "email.sent"),
		published(v.Feedback[1], "email.delivered"),
	})
}

func TestTimelineOfABouncedMail(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "2", ToEmail: "b@example.com"})
	require.NoError(t, err)
	b.send(t, store.Outcome{Status: mailtype.StatusSent, Provider: "resend", ProviderMessageID: "em_2"})
	at := time.Now().Truncate(time.Microsecond)
	b.report(t, store.Webhook{ID: "w2", Type: "email.bounced", EmailID: "em_2", Effect: store.EffectBounced, At: at,
		BounceType: store.BouncePermanent, BounceSubtype: "General", Reason: "permanent bounce General: 550 5.1.1"})

	v := b.view(t, "order-confirmed:2")
	require.Equal(t, mailtype.StatusFailed, v.Status)
	require.Len(t, v.Feedback, 2)
	b.requireTimeline(t, v.DedupeKey, []store.TimelineEntry{
		received(v),
		entry(*v.FirstAttemptAt, store.TimelineAttempt, "first claimed for sending", "claims", "1", "sends", "1"),
		entry(b.ts(t, `SELECT send_started_at FROM mail`), store.TimelineAttempt, "send 1: resend accepted the mail as em_2",
			"accepted_at", rfc(*v.SentAt), "provider", "resend", "provider_message_id", "em_2", "send", "1"),
		entry(v.Feedback[0].CreatedAt, store.TimelineOutcome, "sent: resend accepted the mail as em_2",
			"provider", "resend", "provider_message_id", "em_2", "sends", "1"),
		published(v.Feedback[0], "email.sent"),
		entry(at, store.TimelineReport, "resend reported email.bounced", "type", "email.bounced", "webhook_id", "w2",
			"bounce_type", "permanent", "bounce_subtype", "General", "events", "EmailBounced"),
		entry(v.Feedback[1].CreatedAt, store.TimelineOutcome, "failed: the provider reported a bounce",
			"provider", "resend", "provider_message_id", "em_2", "sends", "1"),
		published(v.Feedback[1], "email.bounced"),
	})
}

func TestTimelineOfARetriedThenSentMail(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "3", ToEmail: "c@example.com"})
	require.NoError(t, err)
	b.send(t, store.Outcome{Status: mailtype.StatusPending, RetryAfter: time.Hour, Provider: "smtp", ErrorClass: mailtype.Transient,
		ErrorReason: mailtype.ReasonDeferred, Error: "451 4.7.1 try later"})
	b.sc.Exec(t, `UPDATE mail SET send_after = now()`)
	const queued = "250 2.0.0 Ok: queued as 4F2"
	b.send(t, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: queued})

	v := b.view(t, "order-confirmed:3")
	require.Len(t, v.Feedback, 1)
	attempt := func(n int, what string) time.Time {
		return b.ts(t, `SELECT `+what+` FROM mail_attempt ORDER BY id OFFSET $1 LIMIT 1`, n)
	}
	b.requireTimeline(t, v.DedupeKey, []store.TimelineEntry{
		received(v),
		entry(*v.FirstAttemptAt, store.TimelineAttempt, "first claimed for sending", "claims", "2", "sends", "2"),
		entry(attempt(0, "at"), store.TimelineAttempt, "send 1 through smtp: pending: deferred: 451 4.7.1 try later",
			"claim", "1", "send", "1", "status", "pending", "provider", "smtp", "error", "deferred: 451 4.7.1 try later",
			"error_class", "transient", "started_at", rfc(attempt(0, "started_at"))),
		entry(attempt(1, "at"), store.TimelineAttempt, "send 2: smtp accepted the mail as "+queued,
			"claim", "2", "send", "2", "status", "sent", "provider", "smtp", "provider_message_id", queued,
			"started_at", rfc(attempt(1, "started_at"))),
		entry(v.Feedback[0].CreatedAt, store.TimelineOutcome, "sent: smtp accepted the mail as "+queued,
			"provider", "smtp", "provider_message_id", queued, "sends", "2"),
		published(v.Feedback[0], "email.sent"),
	})
}

func TestTimelineOfACancelledTombstone(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	cancel := uuid.NewString()
	_, err := b.st.Ingest(testCtx(t), []store.IngestItem{{Cancel: &store.Cancel{EventID: cancel, OrderID: "4", Template: "order_confirmed"}}})
	require.NoError(t, err)

	v := b.view(t, "order-confirmed:4")
	require.Len(t, v.Feedback, 1)
	b.requireTimeline(t, v.DedupeKey, []store.TimelineEntry{
		entry(v.CreatedAt, store.TimelineReceived, "tombstone written: the order was cancelled before its confirmation arrived",
			"cancel_event_id", cancel, "order_id", "4", "revision", "1", "template", "order_confirmed"),
		entry(v.Feedback[0].CreatedAt, store.TimelineOutcome, "cancelled", "sends", "0"),
		published(v.Feedback[0], "email.cancelled"),
	})
}

func TestTimelineOfAnUnknownMailSettledByEvidence(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	key := mailtype.IdempotencyKey("shop-a", "order-confirmed:5")
	id, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "5", ToEmail: "e@example.com",
		From: "orders@shop.example", IdempotencyKey: key})
	require.NoError(t, err)
	const lost = "the reply to the message data was lost"
	b.send(t, store.Outcome{Status: mailtype.StatusUnknown, Provider: "resend", ErrorClass: mailtype.Ambiguous,
		ErrorReason: mailtype.ReasonTimeout, Error: lost, Ambiguous: true})
	at := time.Now().Truncate(time.Microsecond)
	b.report(t, store.Webhook{ID: "w5", Type: "email.delivered", MailTag: mailtype.ReportTag(id, key), Effect: store.EffectDelivered, At: at})

	v := b.view(t, "order-confirmed:5")
	require.Equal(t, mailtype.StatusSent, v.Status)
	require.Len(t, v.Feedback, 3)
	b.requireTimeline(t, v.DedupeKey, []store.TimelineEntry{
		received(v),
		entry(*v.FirstAttemptAt, store.TimelineAttempt, "first claimed for sending", "claims", "1", "sends", "1"),
		entry(b.ts(t, `SELECT at FROM mail_attempt`), store.TimelineAttempt, "send 1 through resend: unknown: timeout: "+lost,
			"claim", "1", "send", "1", "status", "unknown", "provider", "resend", "error", "timeout: "+lost,
			"error_class", "ambiguous", "started_at", rfc(b.ts(t, `SELECT started_at FROM mail_attempt`))),
		entry(v.Feedback[0].CreatedAt, store.TimelineOutcome, "unknown: the send may have reached the provider: "+lost,
			"provider", "resend", "error_class", "ambiguous", "error_reason", "timeout", "error", lost, "sends", "1"),
		published(v.Feedback[0], "email.unknown"),
		entry(at, store.TimelineReport, "resend reported email.delivered", "type", "email.delivered", "webhook_id", "w5",
			"events", "EmailSent, EmailDelivered"),
		entry(v.Reconciliation.At, store.TimelineReport, "the unknown send was settled by the provider's report email.delivered",
			"by", "provider_evidence", "evidence_type", "email.delivered", "evidence_id", "w5"),
		entry(v.Feedback[1].CreatedAt, store.TimelineOutcome, "sent, as resend's report shows",
			"provider", "resend", "reconciled_by", "provider_evidence", "sends", "1"),
		published(v.Feedback[1], "email.sent"),
		published(v.Feedback[2], "email.delivered"),
	})
}

func TestTimelineAndContentOfAnUnknownKey(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := b.st.MailTimeline(testCtx(t), "order-confirmed:6")
	require.True(t, errors.Is(err, store.ErrNotFound), "%v", err)
	_, err = b.st.MailContentByKey(testCtx(t), "order-confirmed:6")
	require.True(t, errors.Is(err, store.ErrNotFound), "%v", err)
}

func TestMailContentByKey(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "7", ToEmail: "g@example.com", CustomerName: `Ann "A"`,
		From: "Shop <orders@shop.example>", ToName: `Ann "A"`, ReplyTo: "help@shop.example",
		Subject: "Order 7", BodyText: "text 7", BodyHTML: "<p>item <script>alert(1)</script></p>"})
	require.NoError(t, err)
	c, err := b.st.MailContentByKey(testCtx(t), "order-confirmed:7")
	require.NoError(t, err)
	require.Equal(t, store.MailContent{DedupeKey: "order-confirmed:7", From: "Shop <orders@shop.example>", To: "g@example.com",
		ToName: `Ann "A"`, ReplyTo: "help@shop.example", Subject: "Order 7", MessageID: mailtype.MessageID("order-confirmed:7", "example.com"),
		Text: "text 7", HTML: "<p>item <script>alert(1)</script></p>"}, c)
}

func TestTimelineOfAResend(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	key := seedMail(t, b.sc, "order-confirmed:10", "10", mailtype.StatusSent)
	newKey, err := b.st.Resend(testCtx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	v := b.view(t, newKey)
	b.requireTimeline(t, newKey, []store.TimelineEntry{
		entry(v.CreatedAt, store.TimelineReceived, "resend of order-confirmed:10 written by an operator", "event_id", v.EventID,
			"occurred_at", rfc(*v.OccurredAt), "order_id", "10", "revision", "1", "template", "order_confirmed"),
		entry(v.UpdatedAt, store.TimelineOutcome, "pending (work left)"),
	})
}

func TestTimelineShowsTheTraceOfTheInputEvent(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "11", ToEmail: "k@example.com"})
	require.NoError(t, err)
	b.sc.Exec(t, `UPDATE mail SET trace_context = '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'`)
	got := b.timeline(t, "order-confirmed:11")
	require.Equal(t, store.TimelineReceived, got[0].Kind)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", got[0].Detail["trace_id"])
}
