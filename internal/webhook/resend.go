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

// The Resend event types mailsvc acts on (Resend's documentation,
// "Webhooks", event types); every other type is recorded and ignored.
const (
	ResendDelivered  = "email.delivered"
	ResendBounced    = "email.bounced"
	ResendComplained = "email.complained"
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
	To     recipients    `json:"to"`
	Bounce *resendBounce `json:"bounce"`
}

// resendBounce is data.bounce of email.bounced: type is Permanent,
// Transient or Undetermined (Resend's documentation, "Email Bounces");
// subType the finer kind (General, NoEmail, Suppressed, ...).
type resendBounce struct {
	Type    string `json:"type"`
	SubType string `json:"subType"`
	Message string `json:"message"`
}

// recipients decodes a JSON array of strings, or one string.
type recipients []string

func (r *recipients) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*r = recipients{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("data.to: want an array of addresses")
	}
	*r = many
	return nil
}

// subtypeChars is what a bounce subtype may hold to be published.
var subtypeChars = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// parseResend decodes a verified Resend body into what the store records
// for webhook id. An error is a malformed body: not one JSON object,
// without a type, or, for an event mailsvc acts on, without created_at or
// data.email_id, or a bounce or complaint without recipients.
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
	w := store.Webhook{Provider: ProviderResend, ID: id, Type: ev.Type, At: ev.CreatedAt, EmailID: ev.Data.EmailID}
	switch ev.Type {
	case ResendDelivered:
		w.Effect = store.EffectDelivered
	case ResendBounced:
		if ev.Data.Bounce == nil || !strings.EqualFold(ev.Data.Bounce.Type, "permanent") {
			return w, nil // transient or undetermined: Resend retries, the address may work
		}
		w.Effect, w.BounceType = store.EffectBounced, "permanent"
		if st := ev.Data.Bounce.SubType; subtypeChars.MatchString(st) {
			w.BounceSubtype = st
		}
		w.Reason = strings.TrimSpace(fmt.Sprintf("permanent bounce %s: %s", w.BounceSubtype, ev.Data.Bounce.Message))
	case ResendComplained:
		w.Effect, w.Reason = store.EffectComplained, "the recipient marked a mail as spam"
	default:
		return w, nil
	}
	if ev.CreatedAt.IsZero() {
		return store.Webhook{}, errors.New("created_at: missing")
	}
	if w.EmailID == "" || len(w.EmailID) > 255 {
		return store.Webhook{}, errors.New("data.email_id: missing or longer than 255 bytes")
	}
	if w.Effect != store.EffectDelivered {
		if w.Recipients = addresses(ev.Data.To); len(w.Recipients) == 0 {
			return store.Webhook{}, errors.New("data.to: no recipient")
		}
	}
	return w, nil
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
