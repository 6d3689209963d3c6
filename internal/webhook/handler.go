package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	svix "github.com/svix/svix-webhooks/go"

	"github.com/mailsvc/mailsvc/internal/store"
)

// Tolerance is how far svix-timestamp may be from now, either way: the
// Standard Webhooks specification's five minutes, which the svix library
// also enforces.
const Tolerance = 5 * time.Minute

// Recorder records a verified webhook once; *store.Store implements it.
type Recorder interface {
	RecordWebhook(ctx context.Context, w store.Webhook) (store.WebhookResult, error)
}

// resendHandler serves POST /webhooks/resend: it verifies the request the
// Standard Webhooks way Resend signs it (svix-id, svix-timestamp,
// svix-signature: "v1,<base64 HMAC-SHA256 of id.timestamp.body>" under the
// whsec_ secret, several space-separated during a secret rotation), then
// decodes and records it. Nothing is recorded before the signature holds.
type resendHandler struct {
	verifier *svix.Webhook
	rec      Recorder
	metrics  *Metrics
	log      *slog.Logger
	cfg      Config
	// onOutbox is called after a record that wrote feedback events.
	onOutbox func()
}

// answer is the JSON body of every reply: the result, and for a refusal
// why (never a header value or the secret).
type answer struct {
	Result Result `json:"result"`
	Error  string `json:"error,omitempty"`
}

func (h *resendHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res, code, why, rec := h.handle(r)
	h.metrics.Received.WithLabelValues(ProviderResend, string(res)).Inc()
	attrs := []any{"provider", ProviderResend, "result", res, "webhook_id", rec.ID, "type", rec.Type}
	switch {
	case code >= 500:
		h.log.Error("webhook not recorded; the provider will redeliver it", append(attrs, "error", why)...)
	case code >= 400:
		h.log.Warn("webhook refused", append(attrs, "remote", r.RemoteAddr, "error", why)...)
	default:
		h.log.Info("webhook received", append(attrs, "email_id", rec.EmailID)...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	a := answer{Result: res}
	if code >= 400 {
		a.Error = why
	}
	_ = json.NewEncoder(w).Encode(a)
}

// handle decides one request: its result, HTTP status, the reason of a
// refusal, and the webhook as decoded (zero before verification).
func (h *resendHandler) handle(r *http.Request) (Result, int, string, store.Webhook) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return ResultTooLarge, http.StatusRequestEntityTooLarge, "body larger than " + strconv.FormatInt(h.cfg.MaxBodyBytes, 10) + " bytes", store.Webhook{}
		}
		return ResultMalformed, http.StatusBadRequest, "body unreadable", store.Webhook{}
	}
	if res, why := h.verify(r.Header, body); res != "" {
		return res, http.StatusUnauthorized, why, store.Webhook{}
	}
	rec, err := parseResend(webhookID(r.Header), body)
	if err != nil {
		return ResultMalformed, http.StatusBadRequest, err.Error(), store.Webhook{ID: webhookID(r.Header)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.StoreTimeout)
	defer cancel()
	got, err := h.rec.RecordWebhook(ctx, rec)
	if err != nil {
		return ResultError, http.StatusServiceUnavailable, err.Error(), rec
	}
	if len(got.Events) > 0 && h.onOutbox != nil {
		h.onOutbox()
	}
	if !got.Duplicate {
		h.metrics.Reports.WithLabelValues(ProviderResend, reportOf(rec), strconv.FormatBool(got.Matched > 0)).Inc()
	}
	return resultOf(rec, got), http.StatusOK, "", rec
}

// resultOf names what a successful record did.
func resultOf(rec store.Webhook, got store.WebhookResult) Result {
	switch {
	case got.Duplicate:
		return ResultDuplicate
	case rec.Effect == store.EffectNone:
		return ResultIgnored
	case got.Matched == 0:
		return ResultUnmatched // whatever suppression.scope let it suppress
	}
	return ResultProcessed
}

// verify checks the signature headers and returns "" when they hold, else
// the refusal's result and reason. The timestamp is judged here first so
// that a stale one is counted apart; the signature itself is the
// library's (svix: constant-time comparison with every v1 signature of the
// header).
func (h *resendHandler) verify(hd http.Header, body []byte) (Result, string) {
	id, ts, sig := signatureHeaders(hd)
	if id == "" || ts == "" || sig == "" {
		return ResultBadSignature, "missing svix-id, svix-timestamp or svix-signature"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ResultBadSignature, "svix-timestamp is not a Unix time in seconds"
	}
	switch d := time.Since(time.Unix(sec, 0)).Round(time.Second); {
	case d > Tolerance:
		return ResultStaleTimestamp, "svix-timestamp is " + d.String() + " old, more than the " + Tolerance.String() + " tolerance"
	case d < -Tolerance:
		return ResultStaleTimestamp, "svix-timestamp is " + (-d).String() + " in the future, more than the " + Tolerance.String() + " tolerance"
	}
	if len(id) > 255 {
		return ResultBadSignature, "svix-id longer than 255 bytes"
	}
	if err := h.verifier.Verify(body, hd); err != nil {
		return ResultBadSignature, "no signature matches the secret"
	}
	return "", ""
}

// signatureHeaders returns the id, timestamp and signatures, from the
// svix-* headers (Resend's) or else the webhook-* ones (the Standard
// Webhooks names), as the svix library reads them.
func signatureHeaders(hd http.Header) (id, ts, sig string) {
	id, ts, sig = hd.Get("svix-id"), hd.Get("svix-timestamp"), hd.Get("svix-signature")
	if id == "" || ts == "" || sig == "" {
		id, ts, sig = hd.Get("webhook-id"), hd.Get("webhook-timestamp"), hd.Get("webhook-signature")
	}
	return id, ts, sig
}

func webhookID(hd http.Header) string {
	id, _, _ := signatureHeaders(hd)
	return id
}
