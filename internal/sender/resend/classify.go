package resend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// Resend error names (Resend documentation, "Idempotency Keys").
const (
	// errConcurrentIdempotentRequests: a request with the key is in
	// progress; retrying later is safe.
	errConcurrentIdempotentRequests = "concurrent_idempotent_requests"
	// errResourceLocked: HTTP 409, the resource is locked by a request in
	// progress; "retry after a short delay".
	errResourceLocked = "resource_locked"
	// errDailyQuota and errMonthlyQuota: HTTP 429 when the account's daily
	// or monthly sending quota is used up (Resend API reference, "Errors";
	// "Usage Limits"); waiting for Retry-After does not help.
	errDailyQuota   = "daily_quota_exceeded"
	errMonthlyQuota = "monthly_quota_exceeded"
)

// exchange is what the recorder saw of one API call.
type exchange struct {
	// wrote is set once the whole request was written: from then on a lost
	// response leaves it unknown whether Resend sent the mail.
	wrote atomic.Bool
	// transport is the error of a call that got no response.
	transport error
	status    int
	header    http.Header
	errName   string
	errorMsg  string
}

type exchangeKey struct{}

// withExchange attaches e to ctx, with an httptrace hook that records
// when the request was fully written.
func withExchange(ctx context.Context, e *exchange) context.Context {
	ctx = context.WithValue(ctx, exchangeKey{}, e)
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				e.wrote.Store(true)
			}
		},
	})
}

// recorder is a RoundTripper that records the status, headers and Resend
// error name of a response, and gives resend-go the body back unread.
type recorder struct{ next http.RoundTripper }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	e, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if e != nil && err != nil {
		e.transport = err
	}
	if err != nil || e == nil {
		return resp, err
	}
	e.status, e.header = resp.StatusCode, resp.Header
	if resp.StatusCode >= 300 {
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr == nil {
			var eb struct {
				Name    string `json:"name"`
				Message string `json:"message"`
			}
			if json.Unmarshal(body, &eb) == nil {
				e.errName, e.errorMsg = eb.Name, eb.Message
			}
		}
	}
	return resp, nil
}

// classify maps a failed call to a class and reason (docs/design.md, "Error classes"):
// no response after the request was written is ambiguous (Resend may have
// sent it; retrying with the same key is safe within 24 h); no response
// before that is transient; 429 is transient with the provider's delay;
// 409 invalid_idempotent_request is ambiguous (idempotency_conflict: the key
// was used already, so an earlier attempt reached Resend and may have been
// sent; every attempt sends identical bytes, so this is a key collision or
// a payload changed by hand: the mail ends unknown, for reconciliation,
// never failed and never retried under a new key); a request with the key
// still in progress (409 concurrent_idempotent_requests, resource_locked),
// 408, 5xx, 401 and 403 are transient; other 4xx are permanent
// (validation). Every answered call's error carries its HTTP status and
// error name as detail.
//
// Failures that say nothing about the mail are marked for the pool
// (*sender.ProviderError): a 429 rate_limit_exceeded pauses Resend for its
// Retry-After, a 429 daily_quota_exceeded or monthly_quota_exceeded pauses
// it until a probe succeeds, a 401 or 403 (the API key) and a refused
// connection or unknown host (resend.base_url) count towards the breaker
// as configuration failures, no response and a 5xx or 408 as an outage
// (sender.TroubleOutage), and a 409 of a request in progress waits
// inProgressRetry (sender.TroubleInProgress).
// Every answer that created no email (401, 403, 429), and a failure before
// the request was written, is Reroutable: another provider may take the
// mail.
func classify(ctx context.Context, e *exchange, msg string) error {
	err := errors.New(msg)
	if e.status != 0 {
		return classifyStatus(e, err)
	}
	reason := mailtype.ReasonConnect
	if ctx.Err() != nil {
		reason = mailtype.ReasonTimeout
	}
	if e.wrote.Load() {
		return &sender.ProviderError{Trouble: sender.TroubleOutage, Err: mailtype.NewError(mailtype.Ambiguous, reason, err)}
	}
	me := mailtype.NewError(mailtype.Transient, reason, err)
	me.Reroutable = true
	if refused(e.transport) {
		return &sender.ProviderError{Trouble: sender.TroubleConfig, Err: me}
	}
	return &sender.ProviderError{Trouble: sender.TroubleOutage, Err: me}
}

// inProgressRetry is how long a mail waits after a 409 that says an
// earlier request with its key is still in progress ("try the request
// again later"; Resend names no delay).
const inProgressRetry = 2 * time.Second

// refused reports a connection refused or a host name that does not
// resolve: the API cannot be reached at resend.base_url at all.
func refused(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}

// classifyStatus classifies an answered call by its status and error name
// (the rules of classify); the error carries both as its detail.
func classifyStatus(e *exchange, err error) error {
	detailed := func(class mailtype.Class, reason mailtype.Reason) *mailtype.Error {
		me := mailtype.NewError(class, reason, err)
		me.Detail = mailtype.ProviderDetail{HTTPStatus: e.status, ErrorName: errorName(e.errName)}
		return me
	}
	unsent := func(class mailtype.Class, reason mailtype.Reason) *mailtype.Error {
		me := detailed(class, reason)
		me.Reroutable = true
		return me
	}
	switch s := e.status; {
	case s == http.StatusTooManyRequests && (e.errName == errDailyQuota || e.errName == errMonthlyQuota):
		return &sender.ProviderError{Trouble: sender.TroubleQuota, Err: unsent(mailtype.Transient, mailtype.ReasonRateLimited)}
	case s == http.StatusTooManyRequests:
		return &sender.ProviderError{Trouble: sender.TroubleRateLimited, After: retryAfter(e.header, time.Now()),
			Err: unsent(mailtype.Transient, mailtype.ReasonRateLimited)}
	case s == http.StatusConflict && (e.errName == errConcurrentIdempotentRequests || e.errName == errResourceLocked):
		return &sender.ProviderError{Trouble: sender.TroubleInProgress, After: inProgressRetry,
			Err: detailed(mailtype.Transient, mailtype.ReasonDeferred)}
	case s == http.StatusConflict:
		return detailed(mailtype.Ambiguous, mailtype.ReasonIdempotencyReuse)
	case s >= 500 || s == http.StatusRequestTimeout:
		return &sender.ProviderError{Trouble: sender.TroubleOutage, Err: detailed(mailtype.Transient, mailtype.ReasonServerError)}
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return &sender.ProviderError{Trouble: sender.TroubleConfig, Err: unsent(mailtype.Transient, mailtype.ReasonAuth)}
	}
	return detailed(mailtype.Permanent, mailtype.ReasonRejected)
}

// maxErrorName bounds the length of an error name kept as detail.
const maxErrorName = 64

// errorName returns name when it is an identifier of the shape Resend's
// error names have (lower-case letters, digits and underscores, at most
// maxErrorName bytes: "validation_error"), else "": the name is published
// for consumers to switch on, so text of another shape is not passed on.
func errorName(name string) string {
	if len(name) > maxErrorName || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return ""
	}
	return name
}

// retryAfter reads the delay a 429 asks for: Retry-After (seconds or an
// HTTP date), else ratelimit-reset (seconds), else one second.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
			return time.Duration(n * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), 0)
		}
	}
	if n, err := strconv.ParseFloat(h.Get("ratelimit-reset"), 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second))
	}
	return time.Second
}
