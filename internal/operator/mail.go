package operator

import (
	"fmt"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Field is one line of a mail's report: its name and its text.
type Field struct {
	Name, Value string
}

// MailReport is what `mailsvc mail show` prints for m, one field per line
// in this order, fields with nothing to say left out: the status and its
// verdict (see Verdict, judged at now), identity, content, counters,
// provider, last error, times, and one line per feedback event with its
// publication state. now is the current time (time.Now in the CLI).
func MailReport(m store.MailView, now time.Time) []Field {
	var out []Field
	add := func(name, value string) {
		if value != "" {
			out = append(out, Field{name, value})
		}
	}
	add("dedupe_key", m.DedupeKey)
	add("status", string(m.Status))
	add("verdict", Verdict(m, now))
	add("order_id", m.OrderID)
	add("revision", fmt.Sprint(m.Revision))
	add("template", m.Template+" ("+m.Locale+")")
	add("to", m.ToEmail)
	add("subject", m.Subject)
	add("event_id", m.EventID)
	add("cancel_event_id", m.CancelEventID)
	add("message_id", m.MessageID)
	attempts := fmt.Sprintf("%d sends started (as the feedback events count them), %d claims", m.Sends, m.Attempts)
	if m.ReconciledSends > 0 {
		attempts += fmt.Sprintf("; %d settled as not delivered by reconcile, so %d count toward sender.max_attempts",
			m.ReconciledSends, m.Sends-m.ReconciledSends)
	}
	add("attempts", attempts)
	add("provider", strings.TrimSpace(m.Provider+" "+m.ProviderMessageID))
	add("last_error", m.LastError)
	add("created_at", Stamp(&m.CreatedAt))
	add("first_attempt_at", Stamp(m.FirstAttemptAt))
	add("updated_at", Stamp(&m.UpdatedAt))
	add("sent_at", Stamp(m.SentAt))
	add("delivered_at", Stamp(m.DeliveredAt))
	add("delivery_delayed_at", Stamp(m.DeliveryDelayedAt))
	add("reconciled", EvidenceLine(m))
	add("attachments", attachStateLine(m))
	for _, a := range m.Attachments {
		add("attachment", AttachmentLine(a))
	}
	if len(m.Feedback) == 0 {
		add("feedback", "none written")
	}
	for _, f := range m.Feedback {
		add("feedback", fmt.Sprintf("%s %s written %s, %s", f.EventType, f.EventID, Stamp(&f.CreatedAt), PublishState(f)))
	}
	return out
}

// EvidenceLine is the line `mail show` prints for an `unknown` mail that
// its provider's report settled: "settled by provider evidence: TYPE
// report ID recorded by the provider at T, applied at T2"; "" for any
// other mail.
func EvidenceLine(m store.MailView) string {
	r := m.Reconciliation
	if r == nil {
		return ""
	}
	return fmt.Sprintf("settled by provider evidence: %s report %s recorded by the provider at %s, applied at %s (the mail was unknown; no operator needed)",
		r.EvidenceType, r.EvidenceID, Stamp(&r.EvidenceAt), Stamp(&r.At))
}

// afterSent is what the provider reported about a sent mail later (its
// webhooks): delivered (delivered_at), or bounced or complained about (the
// feedback events written), "" when it reported nothing.
func afterSent(m store.MailView) string {
	out := ""
	if m.DeliveredAt != nil {
		out += "; delivered to the recipient's server at " + Stamp(m.DeliveredAt)
	} else if m.DeliveryDelayedAt != nil {
		out += "; the provider is still trying to deliver it (delayed at " + Stamp(m.DeliveryDelayedAt) + ")"
	}
	for _, f := range m.Feedback {
		if f.EventType == mailtype.EmailComplained {
			out += "; then marked as spam (EmailComplained): the address is suppressed"
		}
	}
	return out
}

// lastReport names the provider's report that failed a sent mail: its
// last EmailBounced or EmailFailed.
func lastReport(m store.MailView) string {
	last := "a provider report"
	for _, f := range m.Feedback {
		if f.EventType == mailtype.EmailBounced || f.EventType == mailtype.EmailFailed {
			last = string(f.EventType)
		}
	}
	return last
}

// Verdict answers "did the customer get it, and if not why" in one line,
// from the mail's status (docs/design.md, "State machine"), judged at now
// (a pending mail is due or waits for its backoff). It names the command
// that acts on the mail where there is one (resend, reconcile).
func Verdict(m store.MailView, now time.Time) string {
	switch m.Status {
	case mailtype.StatusSent:
		if m.CancelEventID != "" && m.Template != mailtype.TemplateCancelNotice {
			return "accepted by the provider at " + Stamp(m.SentAt) + afterSent(m) + "; the order was cancelled too late (EmailCancelTooLate), a cancellation notice follows when mail.cancel_notice is on"
		}
		return "accepted by the provider at " + Stamp(m.SentAt) + afterSent(m)
	case mailtype.StatusPending:
		if m.SendAfter.After(now) {
			return fmt.Sprintf("not sent yet: next attempt after %s (%d sends so far)", Stamp(&m.SendAfter), m.Sends)
		}
		return fmt.Sprintf("not sent yet: due now, waiting for a sender (%d sends so far)", m.Sends)
	case mailtype.StatusSending:
		return "being sent now by " + m.LockedBy + ", lease until " + Stamp(m.LockedUntil)
	case mailtype.StatusFailed:
		if m.SentAt != nil {
			return "accepted by the provider at " + Stamp(m.SentAt) + ", then reported not delivered (" + lastReport(m) +
				"): " + m.LastError + "; `mailsvc mail resend " + m.DedupeKey + "` sends a new copy once the address works"
		}
		if strings.HasPrefix(m.LastError, string(mailtype.ReasonSuppressed)+": ") {
			return "not sent: its recipient is on the suppression list (`mailsvc suppression list`); once removed " +
				"(`mailsvc suppression remove ADDRESS`), `mailsvc mail resend " + m.DedupeKey + "` sends a new copy"
		}
		return "not sent: failed for good (see last_error); `mailsvc mail resend " + m.DedupeKey + "` sends a new copy"
	case mailtype.StatusCancelled:
		if m.EventID == "" {
			return "not sent: the order was cancelled before its confirmation arrived (tombstone)"
		}
		if LastSendUnknown(m) {
			return "cancelled, but the outcome of the last send is unknown (it ended without an answer): " +
				"the mail may have been delivered; check the provider for message_id"
		}
		return "not sent: the order was cancelled"
	case mailtype.StatusUnknown:
		return "may or may not have been delivered (ambiguous send); check the provider, then `mailsvc mail reconcile " + m.DedupeKey + " --delivered|--not-delivered`"
	}
	return ""
}

// LastSendUnknown reports whether the last attempt of m ended without a
// known outcome, so the provider may have the mail: a claim was taken and
// the class of its last error (last_error_class, migration 00080) is
// ambiguous — its lease expired mid-send (lease_expired) or the provider's
// answer was lost.
func LastSendUnknown(m store.MailView) bool {
	return m.Attempts > 0 && m.LastErrorClass == mailtype.Ambiguous
}

// PublishState says whether the relay published the feedback event f: when,
// or how many attempts failed and why, or that it gave up (dead).
func PublishState(f store.FeedbackView) string {
	switch {
	case f.PublishedAt != nil:
		return "published " + Stamp(f.PublishedAt)
	case f.DeadAt != nil:
		return fmt.Sprintf("DEAD after %d attempts: %s", f.Attempts, f.LastError)
	case f.Attempts > 0:
		return fmt.Sprintf("not published yet (%d attempts: %s)", f.Attempts, f.LastError)
	}
	return "not published yet"
}

// Stamp formats t as RFC 3339 in UTC, "" for nil or the zero time.
func Stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// ListHeader names the columns of ListRow, for `mailsvc mail list`.
var ListHeader = []string{"DEDUPE_KEY", "STATUS", "TEMPLATE", "SENDS", "LAST_CHANGE", "AGE", "LAST_ERROR"}

// ListRow is the line `mailsvc mail list` prints for m, one value per
// ListHeader column, judged at now: AGE is the time since the row last
// changed (since it became unknown or failed, for those), in whole
// seconds; LAST_ERROR is its class and text, "-" when none.
func ListRow(m store.MailSummary, now time.Time) []string {
	lastErr := "-"
	if m.LastError != "" {
		lastErr = strings.TrimSpace("(" + string(m.LastErrorClass) + ") " + m.LastError)
		lastErr = strings.TrimPrefix(lastErr, "() ")
	}
	return []string{m.DedupeKey, string(m.Status), m.Template, fmt.Sprint(m.Sends), Stamp(&m.UpdatedAt),
		now.Sub(m.UpdatedAt).Truncate(time.Second).String(), lastErr}
}

// DeliveryUnconfirmed is the "delivery unconfirmed" line `mailsvc mail
// show` adds for a mail the store flags so (store.MailView.
// DeliveryUnconfirmed): how long ago (judged at now) and through which
// provider it was sent, under which provider id, and that no delivery or
// bounce report came within after (mail.delivery_confirm_after). None for
// a mail not flagged. The flag changes nothing: the line says to look the
// mail up at the provider, never to resend it blindly.
func DeliveryUnconfirmed(m store.MailView, after time.Duration, now time.Time) []Field {
	if !m.DeliveryUnconfirmed || m.SentAt == nil {
		return nil
	}
	return []Field{{"delivery unconfirmed", fmt.Sprintf("sent %s ago via %s (id %s), no delivery or bounce report after "+
		"mail.delivery_confirm_after=%s; look the id up in the provider's dashboard or logs before any resend",
		Short(now.Sub(*m.SentAt)), m.Provider, m.ProviderMessageID, Short(after))}}
}

// Short formats d in whole minutes without zero units: 3h, 1h30m, 45m;
// under a minute, whole seconds (0s for none or a negative d).
func Short(d time.Duration) string {
	if d < time.Minute {
		return max(d, 0).Truncate(time.Second).String()
	}
	s := strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s") // 3h0m, 1h30m, 45m
	if h, ok := strings.CutSuffix(s, "h0m"); ok {
		return h + "h"
	}
	return s
}

// attachStateLine says where a mail with attachments stands: "" for a
// mail without.
func attachStateLine(m store.MailView) string {
	switch m.AttachState {
	case "pending":
		return "pending: not sent before every file is fetched and verified"
	case "ready":
		return "ready: every file stored (or, optional, omitted)"
	case "failed":
		return "failed: a required file could not be had (reason attachment)"
	}
	return ""
}

// AttachmentLine is one attachment's line of `mail show`: name, type,
// size, status, attempts and the last refusal, e.g. "Hóa đơn.pdf
// (application/pdf, 48213 bytes, optional): pending after 2 attempts,
// last refused: status: HTTP 503".
func AttachmentLine(a store.AttachmentView) string {
	opt := ""
	if a.Optional {
		opt = ", optional"
	}
	line := fmt.Sprintf("%s (%s, %d bytes%s): %s after %d attempts", a.FileName, a.ContentType, a.Size, opt, a.Status, a.Attempts)
	if a.Reason != "" {
		line += ", last refused: " + a.Reason + ": " + a.Detail
	}
	return line
}
