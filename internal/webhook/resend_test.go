package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
)

func TestParseResend(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 23, 41, 12, 126e6, time.UTC)
	// Resend's own example of email.bounced (its documentation, "Webhooks").
	const example = `{"type":"email.bounced","created_at":"2026-11-22T23:41:12.126Z","data":{
		"broadcast_id":"8b146471-e88e-4322-86af-016cd36fd216","created_at":"2026-11-22T23:41:11.894719+00:00",
		"email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>",
		"to":["delivered@resend.dev"],"subject":"Sending this example","template_id":"43f68331-0622-4e15-8202-246a0388854b",
		"bounce":{"message":"The recipient's email address is on the suppression list because it has a recent history of producing hard bounces.",
		"subType":"Suppressed","type":"Permanent"},"tags":{"category":"confirm_email"}}}`
	w, err := parseResend("msg_1", []byte(example))
	require.NoError(t, err)
	require.Equal(t, store.Webhook{Provider: "resend", ID: "msg_1", Type: "email.bounced", At: at,
		EmailID: "56761188-7520-42d8-8898-ff6fc54ce618", Effect: store.EffectBounced, Recipients: []string{"delivered@resend.dev"},
		Reason:     "permanent bounce Suppressed: The recipient's email address is on the suppression list because it has a recent history of producing hard bounces.",
		BounceType: "permanent", BounceSubtype: "Suppressed"}, w)

	for _, c := range []struct {
		name, body string
		effect     store.WebhookEffect
		recipients []string
		subtype    string
	}{
		{"lower-case bounce type, a name and a single string", `{"type":"email.bounced","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":"Ann <Ann@Example.com>","bounce":{"type":"permanent","subType":"no such <user>"}}}`,
			store.EffectBounced, []string{"Ann@Example.com"}, ""},
		{"undetermined bounce", `{"type":"email.bounced","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":["a@example.com"],"bounce":{"type":"Undetermined"}}}`, store.EffectBounced, []string{"a@example.com"}, ""},
		{"bounce without details", `{"type":"email.bounced","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":["a@example.com"]}}`, store.EffectBounced, []string{"a@example.com"}, ""},
		{"failed", `{"type":"email.failed","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":["a@example.com"],"failed":{"reason":"reached_daily_quota"}}}`, store.EffectFailed, []string{"a@example.com"}, ""},
		{"suppressed", `{"type":"email.suppressed","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":["a@example.com"],"suppressed":{"type":"Suppressed","reason":"previous_complaint"}}}`, store.EffectSuppressed, []string{"a@example.com"}, ""},
		{"delayed", `{"type":"email.delivery_delayed","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e"}}`, store.EffectDelayed, nil, ""},
		{"a malformed data.to loses no report", `{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e","to":{"x":5}}}`,
			store.EffectDelivered, nil, ""},
		{"complaint to two", `{"type":"email.complained","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":["a@example.com"," b@example.com ",""]}}`, store.EffectComplained, []string{"a@example.com", "b@example.com"}, ""},
		{"delivery needs no recipient", `{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e"}}`,
			store.EffectDelivered, nil, ""},
		{"a complaint needs no recipient either: the mail's own is suppressed", `{"type":"email.complained","created_at":"2026-11-22T23:41:12Z",
			"data":{"email_id":"e","to":[]}}`, store.EffectComplained, nil, ""},
		{"another type, nothing else read", `{"type":"contact.created","data":{"id":"c"}}`, store.EffectNone, nil, ""},
	} {
		w, err := parseResend("m", []byte(c.body))
		require.NoError(t, err, c.name)
		require.Equal(t, c.effect, w.Effect, c.name)
		require.Equal(t, c.recipients, w.Recipients, c.name)
		require.Equal(t, c.subtype, w.BounceSubtype, c.name)
	}

	for body, want := range map[string]string{
		`[]`:          "body: json: cannot unmarshal array into Go value of type webhook.resendEvent",
		`{"data":{}}`: "type: missing or longer than 64 bytes",
		`{"type":"email.delivered","data":{"email_id":"e"}}`:                                           "created_at: missing",
		`{"type":"email.delivered","created_at":"yesterday","data":{"email_id":"e"}}`:                  `body: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`,
		`{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e\u0000"}}`: `body: a \u0000 escape or invalid UTF-8, which the database cannot store`,
	} {
		_, err := parseResend("m", []byte(body))
		require.EqualError(t, err, want, body)
	}
}

// A report carries the mail's report tag back in data.tags, an object in
// Resend's webhooks; the send request's list form is read too, and a
// malformed or overlong tag is no tag, never a lost report.
func TestParseResendReportTag(t *testing.T) {
	t.Parallel()
	const tag = "42-0123456789abcdef01234567"
	for tags, want := range map[string]string{
		`{"category":"confirm_email","mailsvc_mail":"` + tag + `"}`: tag,
		`[{"name":"mailsvc_mail","value":"` + tag + `"}]`:           tag,
		`{"category":"confirm_email"}`:                              "",
		`"mailsvc_mail"`:                                            "",
		`{"mailsvc_mail":5}`:                                        "",
		`{"mailsvc_mail":"` + strings.Repeat("7", 65) + `"}`:        "",
		`null`: "",
	} {
		body := `{"type":"email.delivered","created_at":"2026-11-22T23:41:12Z","data":{"email_id":"e","tags":` + tags + `}}`
		w, err := parseResend("m", []byte(body))
		require.NoError(t, err, tags)
		require.Equal(t, want, w.MailTag, tags)
		require.Equal(t, store.EffectDelivered, w.Effect, tags)
	}
}
