package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailsvc/mailsvc/internal/store"
)

// ProviderResend is the provider label, and the mails' provider column
// value, of Resend.
const ProviderResend = "resend"

// Resend's email event types (its documentation, "Webhooks: Event
// Types", and the event schemas of resend-openapi). Each is handled on
// purpose: see parseResend and docs/contract.md, "What the order service
// hears after EmailSent".
const (
	ResendSent            = "email.sent"
	ResendDelivered       = "email.delivered"
	ResendDeliveryDelayed = "email.delivery_delayed"
	ResendBounced         = "email.bounced"
	ResendComplained      = "email.complained"
	ResendFailed          = "email.failed"
	ResendSuppressed      = "email.suppressed"
	ResendScheduled       = "email.scheduled"
	ResendOpened          = "email.opened"
	ResendClicked         = "email.clicked"
	ResendReceived        = "email.received"
)

// resendEvent is the body of a Resend webhook: a type, when Resend created
// the event, and data about the email. Fields mailsvc does not read (from,
// subject, tags, ...) are left out.
type resendEvent struct {
	Type      string     `json:"type"`
	CreatedAt time.Time  `json:"created_at"`
	Data      resendData `json:"data"`
}

type resendData struct {
	// EmailID is the id Resend's send API returned, stored in the mail's
	// provider_message_id.
	EmailID string `json:"email_id"`
	// To is Resend's list of recipients (plain addresses, or "Name
	// <address>"); a single string is taken too.
	To         recipients        `json:"to"`
	Bounce     *resendBounce     `json:"bounce"`
	Failed     *resendFailed     `json:"failed"`
	Suppressed *resendSuppressed `json:"suppressed"`
	// Tags are the tags the mail was sent with (reportTag).
	Tags resendTags `json:"tags"`
}

// resendBounce is data.bounce of email.bounced: type is Permanent,
// Transient or Undetermined (Resend's documentation, "Email Bounces");
// subType the finer kind (General, NoEmail, MailboxFull, ...).
type resendBounce struct {
	Type    string `json:"type"`
	SubType string `json:"subType"`
	Message string `json:"message"`
}

// resendFailed is data.failed of email.failed: why Resend did not send
// the mail it had accepted (e.g. reached_daily_quota).
type resendFailed struct {
	Reason string `json:"reason"`
}

// resendSuppressed is data.suppressed of email.suppressed: Resend did not
// send the mail because the address is on a suppression list (type
// Suppressed, or OnAccountSuppressionList), for a previous_bounce or a
// previous_complaint.
type resendSuppressed struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// recipients decodes a JSON array of strings, or one string.
type recipients []string

// Anything else is taken as no recipient: data.to suppresses only for a
// report that names no mail of this deployment (suppression.scope
// account), so a malformed list must not lose the report itself.
func (r *recipients) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*r = recipients{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err == nil {
		*r = many
	}
	return nil
}

// subtypeChars is what a bounce subtype may hold to be published.
var subtypeChars = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// parseResend decodes a verified Resend body into what the store records
// for webhook id. An error is a malformed body: not one JSON object,
// without a type, or, for an event mailsvc acts on, without created_at or
// data.email_id. Types that change nothing for a mail (email.sent,
// email.scheduled, email.opened, email.clicked, email.received and every
// contact.* and domain.* event) are recorded and counted, with no effect.
func parseResend(id string, body []byte) (store.Webhook, error) {
	var ev resendEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return store.Webhook{}, fmt.Errorf("body: %w", err)
	}
	if bytes.Contains(body, []byte(`\u0000`)) || !utf8.Valid(body) {
		// PostgreSQL text holds neither: refused for good, not a 503 the
		// provider would redeliver for days.
		return store.Webhook{}, errors.New("body: a \\u0000 escape or invalid UTF-8, which the database cannot store")
	}
	if ev.Type == "" || len(ev.Type) > 64 {
		return store.Webhook{}, errors.New("type: missing or longer than 64 bytes")
	}
	// A report dated in the future is taken as of now: its time becomes
	// delivered_at and provider_event.at.
	at := ev.CreatedAt
	if now := time.Now().UTC(); at.After(now) {
		at = now
	}
	w := store.Webhook{Provider: ProviderResend, ID: id, Type: ev.Type, At: at, EmailID: ev.Data.EmailID,
		MailTag: ev.Data.Tags.reportTag()}
	if !classify(&w, ev.Data) {
		return w, nil
	}
	if ev.CreatedAt.IsZero() {
		return store.Webhook{}, errors.New("created_at: missing")
	}
	if w.EmailID == "" || len(w.EmailID) > 255 {
		return store.Webhook{}, errors.New("data.email_id: missing or longer than 255 bytes")
	}
	w.Recipients = addresses(ev.Data.To)
	return w, nil
}

// classify sets w's effect and what it carries from d, and reports whether
// the type is one mailsvc acts on.
func classify(w *store.Webhook, d resendData) bool {
	switch w.Type {
	case ResendDelivered:
		w.Effect = store.EffectDelivered
	case ResendDeliveryDelayed:
		w.Effect = store.EffectDelayed
	case ResendBounced:
		w.Effect, w.BounceType = store.EffectBounced, store.BounceUndetermined
		if b := d.Bounce; b != nil {
			w.BounceType = bounceType(b.Type)
			w.BounceSubtype = token(b.SubType)
			w.Reason = strings.TrimSpace(fmt.Sprintf("%s bounce %s: %s", w.BounceType, w.BounceSubtype, b.Message))
		} else {
			w.Reason = "undetermined bounce: the provider gave no details"
		}
	case ResendComplained:
		w.Effect, w.Reason = store.EffectComplained, "the recipient marked a mail as spam"
	case ResendFailed:
		w.Effect, w.Reason = store.EffectFailed, "the provider did not send the mail"
		if f := d.Failed; f != nil {
			w.ProviderReason = token(f.Reason)
			w.Reason = strings.TrimSpace("the provider did not send the mail: " + f.Reason)
		}
	case ResendSuppressed:
		w.Effect, w.Reason = store.EffectSuppressed, "the address is on the provider's suppression list"
		if sp := d.Suppressed; sp != nil {
			w.ProviderReason = token(sp.Reason)
			w.Reason = strings.TrimSpace(fmt.Sprintf("the address is on the provider's suppression list (%s %s): %s",
				sp.Type, sp.Reason, sp.Message))
		}
	default:
		return false
	}
	return true
}

// bounceType maps Resend's bounce type to mailsvc's; anything but
// Permanent and Transient is undetermined.
func bounceType(t string) string {
	switch {
	case strings.EqualFold(t, "permanent"):
		return store.BouncePermanent
	case strings.EqualFold(t, "transient"):
		return store.BounceTransient
	}
	return store.BounceUndetermined
}

// token is s when it is a short word that may be published
// (subtypeChars), else "".
func token(s string) string {
	if subtypeChars.MatchString(s) {
		return s
	}
	return ""
}

// addresses returns the bare address of each recipient ("Name <a@b>"
// gives a@b; one that does not parse is kept as written, trimmed).
func addresses(to []string) []string {
	var out []string
	for _, t := range to {
		if a, err := mail.ParseAddress(t); err == nil {
			t = a.Address
		}
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
