package webhook_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux: TestOnlyTheWebhookPathIsServed
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/webhook"
)

// A signed delivery, permanent bounce and complaint each change their
// rows and publish exactly one feedback event; a transient bounce and an
// event type mailsvc does not act on change nothing but their record.
func TestSignedWebhookRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ann := h.sentByResend(t, "1", "ann@example.com", "em_1")
	bob := h.sentByResend(t, "2", "Bob@Example.com", "em_2")
	h.sentByResend(t, "3", "carol@example.com", "em_3")
	for i, to := range []string{"dan", "eve", "fay", "gus"} {
		h.sentByResend(t, fmt.Sprint(4+i), to+"@example.com", fmt.Sprintf("em_%d", 4+i))
	}
	now := time.Now()
	for _, c := range []struct {
		id   string
		body []byte
		want webhook.Result
	}{
		{"msg_1", event("email.delivered", "em_1", "ann@example.com", now, nil), webhook.ResultProcessed},
		{"msg_2", event("email.bounced", "em_2", "Bob <Bob@EXAMPLE.com>", now, bounce("Permanent", "General")), webhook.ResultProcessed},
		{"msg_3", event("email.complained", "em_3", "carol@example.com", now, nil), webhook.ResultProcessed},
		{"msg_4", event("email.bounced", "em_4", "dan@example.com", now, bounce("Transient", "MailboxFull")), webhook.ResultProcessed},
		{"msg_5", event("email.failed", "em_5", "eve@example.com", now,
			map[string]any{"failed": map[string]any{"reason": "reached_daily_quota"}}), webhook.ResultProcessed},
		{"msg_6", event("email.suppressed", "em_6", "fay@example.com", now, map[string]any{"suppressed": map[string]any{
			"type": "OnAccountSuppressionList", "reason": "previous_bounce", "message": "bounced before"}}), webhook.ResultProcessed},
		{"msg_7", event("email.delivery_delayed", "em_7", "gus@example.com", now, nil), webhook.ResultProcessed},
		{"msg_8", event("email.opened", "em_1", "ann@example.com", now, nil), webhook.ResultIgnored},
		{"msg_9", event("email.sent", "em_1", "ann@example.com", now, nil), webhook.ResultIgnored},
		{"msg_10", event("email.clicked", "em_1", "ann@example.com", now, nil), webhook.ResultIgnored},
		{"msg_11", event("email.scheduled", "em_1", "ann@example.com", now, nil), webhook.ResultIgnored},
		{"msg_12", event("email.delivered", "em_unknown", "dan@example.com", now, nil), webhook.ResultUnmatched},
		// Another sender's mail on the same account: counted, suppresses nothing.
		{"msg_13", event("email.bounced", "em_unknown", "victim@example.com", now, bounce("Permanent", "General")), webhook.ResultUnmatched},
		// A bounce of carol's mail that names another address suppresses carol only.
		{"msg_14", event("email.bounced", "em_3", "mallory@example.com", now, bounce("Permanent", "NoEmail")), webhook.ResultProcessed},
	} {
		r := h.post(t, signed(t, c.id, now, c.body, secret), c.body)
		require.Equal(t, reply{Code: http.StatusOK, Result: c.want}, r, c.id)
	}

	require.EqualValues(t, 14, h.count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'resend'`))
	require.EqualValues(t, 1, h.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent'
		AND delivered_at = $2`, ann, now.Truncate(time.Millisecond)))
	require.EqualValues(t, 1, h.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'failed' AND delivered_at IS NULL`, bob))
	require.EqualValues(t, 1, h.count(t, `SELECT count(*) FROM mail WHERE order_id = '7' AND status = 'sent' AND delivery_delayed_at IS NOT NULL`))
	require.Equal(t, map[string]string{"1": "sent", "2": "failed", "3": "failed", "4": "failed", "5": "failed", "6": "failed", "7": "sent"},
		h.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.Equal(t, map[string]string{"Bob@example.com": "webhook/bounce", "carol@example.com": "webhook/complaint",
		"fay@example.com": "webhook/bounce"}, h.sc.QueryMap(t, `SELECT address, source FROM suppression`))
	require.Equal(t, map[string]int{"EmailSent": 7, "EmailDelivered": 1, "EmailBounced": 3, "EmailComplained": 1, "EmailFailed": 2}, h.published(t))
	require.Equal(t, map[string]string{
		"EmailDelivered order-confirmed:1":  "msg_1 email.delivered",
		"EmailBounced order-confirmed:2":    "msg_2 email.bounced permanent General",
		"EmailComplained order-confirmed:3": "msg_3 email.complained",
		"EmailBounced order-confirmed:3":    "msg_14 email.bounced permanent NoEmail",
		"EmailBounced order-confirmed:4":    "msg_4 email.bounced transient MailboxFull",
		"EmailFailed order-confirmed:5":     "msg_5 email.failed provider_failed reached_daily_quota",
		"EmailFailed order-confirmed:6":     "msg_6 email.suppressed suppressed previous_bounce",
	}, h.sc.QueryMap(t, `SELECT event_type || ' ' || dedupe_key, concat_ws(' ', payload#>>'{data,provider_event,webhook_id}',
		payload#>>'{data,provider_event,type}', payload#>>'{data,provider_event,bounce_type}',
		payload#>>'{data,provider_event,bounce_subtype}', payload#>>'{data,error_reason}',
		payload#>>'{data,provider_event,reason}') FROM outbox WHERE event_type <> 'EmailSent'`))
	require.Equal(t, 8, h.received(t, webhook.ResultProcessed))
	require.Equal(t, 4, h.received(t, webhook.ResultIgnored))
	require.Equal(t, 2, h.received(t, webhook.ResultUnmatched))
	for report, want := range map[string]int{"delivered true": 1, "delivered false": 1, "bounced_permanent true": 2,
		"bounced_permanent false": 1, "bounced_transient true": 1, "failed true": 1, "suppressed true": 1,
		"delivery_delayed true": 1, "complained true": 1, "other false": 4} {
		require.Equal(t, want, h.reported(t, report), report)
	}
}

// During a secret rotation Resend signs with the old and the new secret,
// space separated: either order verifies; the old one alone does not.
func TestSecretRotationTwoSignatures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sentByResend(t, "1", "ann@example.com", "em_1")
	h.sentByResend(t, "2", "bob@example.com", "em_2")
	now := time.Now()
	one := event("email.delivered", "em_1", "ann@example.com", now, nil)
	require.Equal(t, reply{Code: http.StatusOK, Result: webhook.ResultProcessed},
		h.post(t, signed(t, "msg_r1", now, one, oldSecret, secret), one))
	two := event("email.delivered", "em_2", "bob@example.com", now, nil)
	require.Equal(t, reply{Code: http.StatusOK, Result: webhook.ResultProcessed},
		h.post(t, signed(t, "msg_r2", now, two, secret, oldSecret), two))
	three := event("email.complained", "em_2", "bob@example.com", now, nil)
	r := h.post(t, signed(t, "msg_r3", now, three, oldSecret), three)
	require.Equal(t, reply{Code: http.StatusUnauthorized, Result: webhook.ResultBadSignature, Error: "no signature matches the secret"}, r)

	require.EqualValues(t, 2, h.count(t, `SELECT count(*) FROM webhook_event`))
	require.EqualValues(t, 2, h.count(t, `SELECT count(*) FROM mail WHERE delivered_at IS NOT NULL`))
	require.EqualValues(t, 0, h.count(t, `SELECT count(*) FROM suppression`))
	require.Equal(t, map[string]int{"EmailSent": 2, "EmailDelivered": 2}, h.published(t))
	require.Equal(t, 1, h.received(t, webhook.ResultBadSignature))
}

// The webhook listener faces the internet and serves only its webhook
// path: not Go's profiles (this test binary imports net/http/pprof, which
// registers them on http.DefaultServeMux), nor /metrics.
func TestOnlyTheWebhookPathIsServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/metrics", "/healthz", "/"} {
		resp, err := http.Get("http://" + h.srv.Addr() + path)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}

// A refused request — stale or future timestamp, bad or missing signature,
// malformed body, too large — gets a 4xx, records nothing, publishes
// nothing and is counted; no log line holds the secret.
func TestRefusedWebhooksChangeNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sentByResend(t, "1", "ann@example.com", "em_1")
	now := time.Now()
	body := event("email.bounced", "em_1", "ann@example.com", now, bounce("Permanent", "General"))
	tampered := []byte(strings.Replace(string(body), "ann@example.com", "eve@example.com", 1))
	noHeaders := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name string
		hd   http.Header
		body []byte
		want reply
	}{
		{"stale timestamp", signed(t, "msg_s", now.Add(-6*time.Minute), body, secret), body,
			reply{Code: 401, Result: webhook.ResultStaleTimestamp, Error: " old, more than the 5m0s tolerance"}},
		{"future timestamp", signed(t, "msg_f", now.Add(6*time.Minute), body, secret), body,
			reply{Code: 401, Result: webhook.ResultStaleTimestamp, Error: " in the future, more than the 5m0s tolerance"}},
		{"body changed after signing", signed(t, "msg_b", now, body, secret), tampered,
			reply{Code: 401, Result: webhook.ResultBadSignature, Error: "no signature matches the secret"}},
		{"another secret", signed(t, "msg_o", now, body, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the endpoint's secret"))), body,
			reply{Code: 401, Result: webhook.ResultBadSignature, Error: "no signature matches the secret"}},
		{"unsigned", noHeaders, body,
			reply{Code: 401, Result: webhook.ResultBadSignature, Error: "missing svix-id, svix-timestamp or svix-signature"}},
		{"not JSON", signed(t, "msg_j", now, []byte("{not json"), secret), []byte("{not json"),
			reply{Code: 400, Result: webhook.ResultMalformed, Error: "body: invalid character 'n' looking for beginning of object key string"}},
		{"no email id", signed(t, "msg_e", now, event("email.bounced", "", "ann@example.com", now, bounce("Permanent", "")), secret),
			event("email.bounced", "", "ann@example.com", now, bounce("Permanent", "")),
			reply{Code: 400, Result: webhook.ResultMalformed, Error: "data.email_id: missing or longer than 255 bytes"}},
		{"too large", signed(t, "msg_l", now, make([]byte, 5000), secret), make([]byte, 5000),
			reply{Code: 413, Result: webhook.ResultTooLarge, Error: "body larger than 4096 bytes"}},
	} {
		got := h.post(t, c.hd, c.body)
		require.Contains(t, got.Error, c.want.Error, c.name)
		got.Error = c.want.Error // a stale timestamp's age is in whole seconds, give or take one
		require.Equal(t, c.want, got, c.name)
	}
	require.EqualValues(t, 0, h.count(t, `SELECT count(*) FROM webhook_event`))
	require.EqualValues(t, 0, h.count(t, `SELECT count(*) FROM suppression`))
	require.EqualValues(t, 0, h.count(t, `SELECT count(*) FROM mail WHERE delivered_at IS NOT NULL`))
	require.Equal(t, map[string]int{"EmailSent": 1}, h.published(t))
	for res, n := range map[webhook.Result]int{webhook.ResultStaleTimestamp: 2, webhook.ResultBadSignature: 3,
		webhook.ResultMalformed: 2, webhook.ResultTooLarge: 1, webhook.ResultProcessed: 0} {
		require.Equal(t, n, h.received(t, res), res)
	}
	logs := h.logs.String()
	require.Contains(t, logs, `"result":"stale_timestamp"`)
	key := strings.TrimPrefix(secret, "whsec_")
	require.NotContains(t, logs, key, "the secret is never logged")
	require.NotContains(t, logs, signed(t, "msg_b", now, body, secret).Get("svix-signature")[3:], "nor a signature")
}

// A redelivered webhook (the same svix-id) is answered 200 duplicate and
// changes nothing: one suppression entry, one EmailBounced published.
func TestReplayedWebhookPublishesOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sentByResend(t, "1", "ann@example.com", "em_1")
	now := time.Now()
	body := event("email.bounced", "em_1", "ann@example.com", now, bounce("Permanent", "NoEmail"))
	require.Equal(t, reply{Code: 200, Result: webhook.ResultProcessed}, h.post(t, signed(t, "msg_x", now, body, secret), body))
	// Resend retries with the same id, a new timestamp and signature.
	later := now.Add(30 * time.Second)
	require.Equal(t, reply{Code: 200, Result: webhook.ResultDuplicate}, h.post(t, signed(t, "msg_x", later, body, secret), body))
	require.Equal(t, reply{Code: 200, Result: webhook.ResultDuplicate}, h.post(t, signed(t, "msg_x", now, body, secret), body))

	require.EqualValues(t, 1, h.count(t, `SELECT count(*) FROM webhook_event`))
	require.EqualValues(t, 1, h.count(t, `SELECT count(*) FROM suppression WHERE address = 'ann@example.com' AND source = 'webhook/bounce'`))
	require.Equal(t, map[string]int{"EmailSent": 1, "EmailBounced": 1}, h.published(t))
	require.Equal(t, 2, h.received(t, webhook.ResultDuplicate))
	require.Equal(t, 1, h.received(t, webhook.ResultProcessed))
}
