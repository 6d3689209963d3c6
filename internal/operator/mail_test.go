package operator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

var (
	now   = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	later = now.Add(time.Hour)
)

func TestVerdictOfACancelledMail(t *testing.T) {
	t.Parallel()
	const mayHaveGone = "cancelled, but the outcome of the last send is unknown (it ended without an answer): " +
		"the mail may have been delivered; check the provider for message_id"
	const cancelled = "not sent: the order was cancelled"
	for _, c := range []struct {
		name     string
		eventID  string
		attempts int
		class    mailtype.Class
		want     string
	}{
		{"lease expired mid-send, or the answer was lost", "e1", 1, mailtype.Ambiguous, mayHaveGone},
		{"refused by the server", "e1", 1, mailtype.Transient, cancelled},
		{"refused for good", "e1", 2, mailtype.Permanent, cancelled},
		{"ambiguous class but never claimed", "e1", 0, mailtype.Ambiguous, cancelled},
		{"never attempted", "e1", 0, "", cancelled},
		{"tombstone", "", 0, "", "not sent: the order was cancelled before its confirmation arrived (tombstone)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := store.MailView{Status: mailtype.StatusCancelled, EventID: c.eventID, Attempts: c.attempts,
				LastErrorClass: c.class, LastError: "whatever the text says (ambiguous) lease_expired"}
			require.Equal(t, c.want, operator.Verdict(m, now))
			require.Equal(t, c.want == mayHaveGone, operator.LastSendUnknown(m))
		})
	}
}

func TestVerdictOfEachStatus(t *testing.T) {
	t.Parallel()
	sentAt, lease := now.Add(-time.Minute), now.Add(2*time.Minute)
	for _, c := range []struct {
		name string
		m    store.MailView
		want string
	}{
		{"sent", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt},
			"accepted by the provider at 2026-03-01T11:59:00Z"},
		{"sent, cancelled too late", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt, CancelEventID: "c1", Template: "order_confirmed"},
			"accepted by the provider at 2026-03-01T11:59:00Z; the order was cancelled too late (EmailCancelTooLate), a cancellation notice follows when mail.cancel_notice is on"},
		{"the cancellation notice itself", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt, CancelEventID: "c1", Template: mailtype.TemplateCancelNotice},
			"accepted by the provider at 2026-03-01T11:59:00Z"},
		{"pending, backing off", store.MailView{Status: mailtype.StatusPending, SendAfter: later, Sends: 2},
			"not sent yet: next attempt after 2026-03-01T13:00:00Z (2 sends so far)"},
		{"pending, due", store.MailView{Status: mailtype.StatusPending, SendAfter: now},
			"not sent yet: due now, waiting for a sender (0 sends so far)"},
		{"sending", store.MailView{Status: mailtype.StatusSending, LockedBy: "w1", LockedUntil: &lease},
			"being sent now by w1, lease until 2026-03-01T12:02:00Z"},
		{"sent, then delivered", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt, DeliveredAt: &now},
			"accepted by the provider at 2026-03-01T11:59:00Z; delivered to the recipient's server at 2026-03-01T12:00:00Z"},
		{"sent, then bounced", store.MailView{Status: mailtype.StatusFailed, SentAt: &sentAt, DedupeKey: "order-confirmed:42",
			LastError: "permanent bounce General: 550 5.1.1 unknown",
			Feedback:  []store.FeedbackView{{EventType: mailtype.EmailSent}, {EventType: mailtype.EmailBounced}}},
			"accepted by the provider at 2026-03-01T11:59:00Z, then reported not delivered (EmailBounced): permanent bounce General: 550 5.1.1 unknown; `mailsvc mail resend order-confirmed:42` sends a new copy once the address works"},
		{"sent, then complained about", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt, DeliveredAt: &now,
			Feedback: []store.FeedbackView{{EventType: mailtype.EmailSent}, {EventType: mailtype.EmailComplained}}},
			"accepted by the provider at 2026-03-01T11:59:00Z; delivered to the recipient's server at 2026-03-01T12:00:00Z; then marked as spam (EmailComplained): the address is suppressed"},
		{"sent, delivery delayed", store.MailView{Status: mailtype.StatusSent, SentAt: &sentAt, DeliveryDelayedAt: &now},
			"accepted by the provider at 2026-03-01T11:59:00Z; the provider is still trying to deliver it (delayed at 2026-03-01T12:00:00Z)"},
		{"failed, suppressed", store.MailView{Status: mailtype.StatusFailed, DedupeKey: "order-confirmed:42",
			LastError: "suppressed: the recipient is on the suppression list (mailsvc suppression list); not sent"},
			"not sent: its recipient is on the suppression list (`mailsvc suppression list`); once removed (`mailsvc suppression remove ADDRESS`), `mailsvc mail resend order-confirmed:42` sends a new copy"},
		{"failed", store.MailView{Status: mailtype.StatusFailed, DedupeKey: "order-confirmed:42"},
			"not sent: failed for good (see last_error); `mailsvc mail resend order-confirmed:42` sends a new copy"},
		{"unknown", store.MailView{Status: mailtype.StatusUnknown, DedupeKey: "order-confirmed:42"},
			"may or may not have been delivered (ambiguous send); check the provider, then `mailsvc mail reconcile order-confirmed:42 --delivered|--not-delivered`"},
		{"no status", store.MailView{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, operator.Verdict(c.m, now))
		})
	}
}

func TestMailReportListsFieldsInOrderAndLeavesOutEmptyOnes(t *testing.T) {
	t.Parallel()
	created, published := now.Add(-time.Hour), now.Add(-50*time.Minute)
	m := store.MailView{
		DedupeKey: "order-confirmed:42", Status: mailtype.StatusFailed, OrderID: "42", Revision: 1,
		Template: "order_confirmed", Locale: "vi", ToEmail: "b@example.com", Subject: "s", EventID: "e1",
		MessageID: "<m@example.com>", Attempts: 3, Sends: 2, Provider: "smtp",
		LastError: "rejected: 550 no", LastErrorClass: mailtype.Permanent, CreatedAt: created, UpdatedAt: now,
		Feedback: []store.FeedbackView{
			{EventID: "f1", EventType: mailtype.EmailFailed, CreatedAt: created, PublishedAt: &published},
			{EventID: "f2", EventType: mailtype.EmailFailed, CreatedAt: created, Attempts: 2, LastError: "nack"},
		},
	}
	require.Equal(t, []operator.Field{
		{"dedupe_key", "order-confirmed:42"},
		{"status", "failed"},
		{"verdict", "not sent: failed for good (see last_error); `mailsvc mail resend order-confirmed:42` sends a new copy"},
		{"order_id", "42"},
		{"revision", "1"},
		{"template", "order_confirmed (vi)"},
		{"to", "b@example.com"},
		{"subject", "s"},
		{"event_id", "e1"},
		{"message_id", "<m@example.com>"},
		{"attempts", "2 sends started (as the feedback events count them), 3 claims"},
		{"provider", "smtp"},
		{"last_error", "rejected: 550 no"},
		{"created_at", "2026-03-01T11:00:00Z"},
		{"updated_at", "2026-03-01T12:00:00Z"},
		{"feedback", "EmailFailed f1 written 2026-03-01T11:00:00Z, published 2026-03-01T11:10:00Z"},
		{"feedback", "EmailFailed f2 written 2026-03-01T11:00:00Z, not published yet (2 attempts: nack)"},
	}, operator.MailReport(m, now))

	m.Feedback = nil
	got := operator.MailReport(m, now)
	require.Equal(t, operator.Field{Name: "feedback", Value: "none written"}, got[len(got)-1])
}

func TestPublishState(t *testing.T) {
	t.Parallel()
	at := now
	require.Equal(t, "published 2026-03-01T12:00:00Z", operator.PublishState(store.FeedbackView{PublishedAt: &at, Attempts: 1}))
	require.Equal(t, "DEAD after 5 attempts: unroutable", operator.PublishState(store.FeedbackView{DeadAt: &at, Attempts: 5, LastError: "unroutable"}))
	require.Equal(t, "not published yet (1 attempts: nack)", operator.PublishState(store.FeedbackView{Attempts: 1, LastError: "nack"}))
	require.Equal(t, "not published yet", operator.PublishState(store.FeedbackView{}))
}

func TestStamp(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 3, 1, 19, 0, 0, 0, time.FixedZone("ICT", 7*3600))
	require.Equal(t, "2026-03-01T12:00:00Z", operator.Stamp(&local))
	require.Equal(t, "", operator.Stamp(nil))
	require.Equal(t, "", operator.Stamp(&time.Time{}))
}

// A mail settled by its provider's report says so, with the report, on
// its own line after the times.
func TestMailReportShowsProviderEvidence(t *testing.T) {
	t.Parallel()
	sent, reported := now.Add(-time.Minute), now.Add(-2*time.Minute)
	m := store.MailView{DedupeKey: "order-confirmed:42", Status: mailtype.StatusSent, SentAt: &sent, DeliveredAt: &reported,
		Reconciliation: &store.Reconciliation{By: store.ReconciledByEvidence, At: sent, EvidenceType: "email.delivered",
			EvidenceID: "dsn:7:delivered:2.0.0", EvidenceAt: reported}}
	var got []string
	for _, f := range operator.MailReport(m, now) {
		if f.Name == "reconciled" {
			got = append(got, f.Value)
		}
	}
	require.Equal(t, []string{"settled by provider evidence: email.delivered report dsn:7:delivered:2.0.0 recorded by the provider at " +
		"2026-03-01T11:58:00Z, applied at 2026-03-01T11:59:00Z (the mail was unknown; no operator needed)"}, got)
	m.Reconciliation = nil
	for _, f := range operator.MailReport(m, now) {
		require.NotEqual(t, "reconciled", f.Name)
	}
}

// A flagged mail gets one line naming its send, provider, id and the
// setting; a mail not flagged (or never sent) gets none.
func TestDeliveryUnconfirmedLine(t *testing.T) {
	t.Parallel()
	sent := now.Add(-3*time.Hour - 20*time.Second)
	m := store.MailView{Status: mailtype.StatusSent, SentAt: &sent, Provider: "resend", ProviderMessageID: "em_1",
		DeliveryUnconfirmed: true}
	require.Equal(t, []operator.Field{{Name: "delivery unconfirmed", Value: "sent 3h ago via resend (id em_1), no delivery or " +
		"bounce report after mail.delivery_confirm_after=1h; look the id up in the provider's dashboard or logs before any resend"}},
		operator.DeliveryUnconfirmed(m, time.Hour, now))
	m.DeliveryUnconfirmed = false
	require.Empty(t, operator.DeliveryUnconfirmed(m, time.Hour, now))
	m.DeliveryUnconfirmed, m.SentAt = true, nil
	require.Empty(t, operator.DeliveryUnconfirmed(m, time.Hour, now))
}

func TestShort(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{3 * time.Hour: "3h", 90 * time.Minute: "1h30m", 45*time.Minute + 59*time.Second: "45m",
		30 * time.Second: "30s", -time.Second: "0s", 50 * time.Hour: "50h", 336 * time.Hour: "336h"} {
		require.Equal(t, want, operator.Short(d), d.String())
	}
}
