// Package resendtest is a local stand-in for the Resend API (POST /emails)
// on httptest, implementing the documented idempotency rules (Resend
// documentation, "Idempotency Keys"): a key lives 24 hours; the same key
// with the same payload returns the first response without sending again;
// the same key with another payload is 409 invalid_idempotent_request; a
// request while another with the same key is in progress is 409
// concurrent_idempotent_requests; keys are 1-256 characters (400
// invalid_idempotency_key). Faults can be scripted: 429 with Retry-After
// and rate-limit headers, 429 daily_quota_exceeded and
// monthly_quota_exceeded, 500, 422, any status with a given error name,
// and a response lost after the mail was sent. LimitRate enforces a rate
// limit as Resend documents it ("Usage Limits": requests per second per
// team; every response carries ratelimit-limit, ratelimit-remaining and
// ratelimit-reset, a 429 also retry-after, with the error body
// {"statusCode": 429, "name": "rate_limit_exceeded", "message": ...}). It
// records every request (with its arrival time) and every mail it sent.
// Tags are taken as Resend documents them ("Managing Tags",
// https://resend.com/docs/dashboard/emails/tags: name/value pairs of
// ASCII letters, numbers, underscores or dashes, up to 75 per email;
// others are 422 validation_error), and Event writes a mail's webhook
// body with them echoed back as the object data.tags, as Resend's webhook
// payloads carry them (https://resend.com/docs/webhooks/emails/sent).
package resendtest

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// KeyLifetime is how long an idempotency key is remembered.
const KeyLifetime = 24 * time.Hour

// Fault is what the next request does instead of sending normally.
type Fault struct {
	status     int
	name       string
	retryAfter int
	quota      bool
	lose       bool
	drop       bool
	hold       <-chan struct{}
}

// RateLimited answers 429 with Retry-After: seconds and rate-limit
// headers; nothing is sent and the key is not remembered.
func RateLimited(seconds int) Fault {
	return Fault{status: http.StatusTooManyRequests, retryAfter: seconds}
}

// DailyQuota answers 429 daily_quota_exceeded (the account's daily sending
// quota is used up, Resend API reference, "Errors"), with the rate-limit
// headers of the current window and no retry-after; nothing is sent.
func DailyQuota() Fault {
	return Fault{status: http.StatusTooManyRequests, name: "daily_quota_exceeded", quota: true}
}

// MonthlyQuota answers 429 monthly_quota_exceeded, like DailyQuota.
func MonthlyQuota() Fault {
	return Fault{status: http.StatusTooManyRequests, name: "monthly_quota_exceeded", quota: true}
}

// ServerError answers 500; nothing is sent and the key is not remembered.
func ServerError() Fault { return Fault{status: http.StatusInternalServerError} }

// Invalid answers 422 validation_error; nothing is sent.
func Invalid() Fault { return Fault{status: http.StatusUnprocessableEntity} }

// Error answers status with the error body {"name": name, ...} (Resend API
// reference, "Errors": 403 invalid_api_key, 422 invalid_from_address, 451
// security_error, ...); nothing is sent and the key is not remembered. A
// 429 gets the headers of RateLimited(0).
func Error(status int, name string) Fault { return Fault{status: status, name: name} }

// LoseResponse sends the mail, remembers the key with its response, then
// closes the connection without answering.
func LoseResponse() Fault { return Fault{lose: true} }

// Drop closes the connection after reading the request, sending nothing
// and forgetting the key: an outage in front of the API (a load balancer
// that resets connections), which the client sees as EOF.
func Drop() Fault { return Fault{drop: true} }

// Hold sends the mail only after release is closed, keeping the request
// (and its key) in progress until then.
func Hold(release <-chan struct{}) Fault { return Fault{hold: release} }

// Email is one mail the stand-in sent.
type Email struct {
	ID             string
	IdempotencyKey string
	// Payload is the JSON request body as received.
	Payload []byte
	// Headers are the mail headers of the payload ("headers" field).
	Headers map[string]string
	// Tags are the payload's tags ("tags" field), by name.
	Tags map[string]string
	// From, To and Subject are the payload's.
	From    string
	To      []string
	Subject string
	// Attachments are the payload's attachments, decoded.
	Attachments []Attachment
}

// Request is one request the stand-in received.
type Request struct {
	IdempotencyKey string
	Status         int
	// At is when the request arrived (before it was read).
	At time.Time
	// Replayed is true when the answer was a remembered response.
	Replayed bool
}

type entry struct {
	hash     [32]byte
	at       time.Time
	inFlight bool
	status   int
	body     []byte
}

// Server is a running stand-in. Safe for concurrent use.
type Server struct {
	// URL is the API root to use as resend.base_url; APIKey the accepted key.
	URL    string
	APIKey string

	mu       sync.Mutex
	limit    int
	window   time.Duration
	accepted []time.Time // arrivals of requests inside the current window, oldest first
	keys     map[string]*entry
	// outage is the faults every request meets in turn while down;
	// outageN counts the requests it failed.
	outage   []Fault
	outageN  int
	faults   []Fault
	sent     []Email
	requests []Request
}

// New starts a stand-in accepting apiKey, closed in t.Cleanup.
func New(t testing.TB, apiKey string) *Server {
	t.Helper()
	s := &Server{APIKey: apiKey, keys: map[string]*entry{}}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL + "/"
	return s
}

// LimitRate makes the stand-in refuse, with 429 rate_limit_exceeded, a
// request that would be the limit+1-th within any window (a sliding
// window: Resend's default is 5 requests per second per team). Refused
// requests do not count.
func (s *Server) LimitRate(limit int, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.window = limit, window
}

// SetAPIKey changes the accepted API key (an operator fixed the key).
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.APIKey = key
}

// Inject queues faults for the next requests, in order.
func (s *Server) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Down starts an outage: every request from now on meets the next of
// faults in turn (Drop, ServerError, Error(503, ...)), until Up. Injected
// faults wait.
func (s *Server) Down(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage, s.outageN = faults, 0
}

// Up ends the outage Down started and returns how many requests it
// failed.
func (s *Server) Up() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.outageN
	s.outage, s.outageN = nil, 0
	return n
}

// Sent returns the mails sent so far.
func (s *Server) Sent() []Email {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Email(nil), s.sent...)
}

// Requests returns every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// InFlight returns how many requests hold their key while in progress.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.keys {
		if e.inFlight {
			n++
		}
	}
	return n
}

// call is one request being answered.
type call struct {
	w   http.ResponseWriter
	at  time.Time
	key string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	c := &call{w: w, at: time.Now(), key: r.Header.Get("Idempotency-Key")}
	if r.Method != http.MethodPost || strings.TrimSuffix(r.URL.Path, "/") != "/emails" {
		s.answer(c, http.StatusNotFound, errorBody(http.StatusNotFound, "not_found", "unknown endpoint"), false)
		return
	}
	s.mu.Lock()
	apiKey := s.APIKey
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		s.answer(c, http.StatusUnauthorized, errorBody(http.StatusUnauthorized, "missing_api_key", "invalid API key"), false)
		return
	}
	if !s.admit(c) {
		s.answer(c, http.StatusTooManyRequests, errorBody(http.StatusTooManyRequests, "rate_limit_exceeded",
			"Too many requests: this team's rate limit is reached; see the rate limit response headers"), false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		s.answer(c, http.StatusRequestEntityTooLarge, errorBody(http.StatusRequestEntityTooLarge, "validation_error", "request body too large"), false)
		return
	}
	if _, ok := r.Header["Idempotency-Key"]; ok && (len(c.key) < 1 || len(c.key) > 256) {
		s.answer(c, http.StatusBadRequest, errorBody(http.StatusBadRequest, "invalid_idempotency_key", "key must be 1-256 characters"), false)
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil || req.From == "" || len(req.To) == 0 || req.Subject == "" {
		s.answer(c, http.StatusUnprocessableEntity, errorBody(http.StatusUnprocessableEntity, "validation_error", "from, to and subject are required"), false)
		return
	}
	tags, err := req.tagMap()
	if err != nil {
		s.answer(c, http.StatusUnprocessableEntity, errorBody(http.StatusUnprocessableEntity, "validation_error", err.Error()), false)
		return
	}
	files, err := decodeAttachments(req.Attachments)
	if err != nil {
		s.answer(c, http.StatusUnprocessableEntity, errorBody(http.StatusUnprocessableEntity, "validation_error", err.Error()), false)
		return
	}
	s.handle(c, body, Email{Headers: req.Headers, Tags: tags, From: req.From, To: req.To, Subject: req.Subject, Attachments: files})
}

// admit applies LimitRate to a request arriving at c.at and sets the
// rate-limit headers every response carries (Resend "Usage Limits":
// ratelimit-limit, ratelimit-remaining, ratelimit-reset in seconds, and on
// a 429 retry-after in seconds). false: refused.
func (s *Server) admit(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit <= 0 {
		return true
	}
	for len(s.accepted) > 0 && c.at.Sub(s.accepted[0]) >= s.window {
		s.accepted = s.accepted[1:]
	}
	ok := len(s.accepted) < s.limit
	if ok {
		s.accepted = append(s.accepted, c.at)
	}
	reset := s.window
	if len(s.accepted) > 0 {
		reset = s.accepted[0].Add(s.window).Sub(c.at)
	}
	secs := fmt.Sprint(int(math.Ceil(reset.Seconds())))
	h := c.w.Header()
	h.Set("ratelimit-limit", fmt.Sprint(s.limit))
	h.Set("ratelimit-remaining", fmt.Sprint(s.limit-len(s.accepted)))
	h.Set("ratelimit-reset", secs)
	if !ok {
		h.Set("retry-after", secs)
	}
	return ok
}

// handle applies the idempotency rules, then a fault or a send of e.
func (s *Server) handle(c *call, body []byte, e Email) {
	hash := canonicalHash(body)
	s.mu.Lock()
	if c.key != "" {
		if e, ok := s.keys[c.key]; ok && time.Since(e.at) < KeyLifetime {
			switch {
			case e.inFlight:
				s.mu.Unlock()
				s.answer(c, http.StatusConflict, errorBody(http.StatusConflict, "concurrent_idempotent_requests", "a request with this key is in progress"), false)
			case e.hash != hash:
				s.mu.Unlock()
				s.answer(c, http.StatusConflict, errorBody(http.StatusConflict, "invalid_idempotent_request", "this key was used with another payload"), false)
			default:
				st, b := e.status, e.body
				s.mu.Unlock()
				s.answer(c, st, b, true)
			}
			return
		}
		s.keys[c.key] = &entry{hash: hash, at: time.Now(), inFlight: true}
	}
	var f Fault
	switch {
	case len(s.outage) > 0:
		f = s.outage[s.outageN%len(s.outage)]
		s.outageN++
	case len(s.faults) > 0:
		f, s.faults = s.faults[0], s.faults[1:]
	}
	s.mu.Unlock()
	s.process(c, body, e, f)
}

func (s *Server) process(c *call, body []byte, e Email, f Fault) {
	if f.status != 0 {
		s.fault(c, f)
		return
	}
	if f.drop {
		s.forget(c.key)
		s.record(c, 0, false)
		s.hangUp(c)
		return
	}
	if f.hold != nil {
		<-f.hold
	}
	id := uuid.NewString()
	resp, _ := json.Marshal(map[string]string{"id": id})
	s.mu.Lock()
	e.ID, e.IdempotencyKey, e.Payload = id, c.key, body
	s.sent = append(s.sent, e)
	if e := s.keys[c.key]; c.key != "" && e != nil {
		e.inFlight, e.status, e.body = false, http.StatusOK, resp
	}
	s.mu.Unlock()
	if f.lose {
		s.record(c, 0, false)
		s.hangUp(c)
		return
	}
	s.answer(c, http.StatusOK, resp, false)
}

// hangUp closes c's connection without an answer.
func (s *Server) hangUp(c *call) {
	if hj, ok := c.w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// fault answers an injected error status: nothing is sent and the key is
// not remembered. A rate-limit 429 carries retry-after and the rate-limit
// headers of a used-up window; a quota 429 the headers of the window only.
func (s *Server) fault(c *call, f Fault) {
	s.forget(c.key)
	name := "internal_server_error"
	msg := "injected"
	switch {
	case f.status == http.StatusUnprocessableEntity:
		name = "validation_error"
	case f.quota:
		msg = "the " + strings.TrimSuffix(f.name, "_quota_exceeded") + " email sending quota of this team is reached"
	case f.status == http.StatusTooManyRequests:
		name, msg = "rate_limit_exceeded", "Too many requests: this team's rate limit is reached; see the rate limit response headers"
		h := c.w.Header()
		h.Set("retry-after", fmt.Sprint(f.retryAfter))
		h.Set("ratelimit-limit", "5")
		h.Set("ratelimit-remaining", "0")
		h.Set("ratelimit-reset", fmt.Sprint(f.retryAfter))
	}
	s.answer(c, f.status, errorBody(f.status, cmp.Or(f.name, name), msg), false)
}

func (s *Server) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

func (s *Server) record(c *call, status int, replayed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{IdempotencyKey: c.key, Status: status, Replayed: replayed, At: c.at})
}

func (s *Server) answer(c *call, status int, body []byte, replayed bool) {
	s.record(c, status, replayed)
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(status)
	_, _ = c.w.Write(body)
}

// errorBody is Resend's error body (Resend API reference, "Errors"):
// {"statusCode": 429, "name": "rate_limit_exceeded", "message": "..."}.
func errorBody(status int, name, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"statusCode": status, "name": name, "message": msg})
	return b
}

// canonicalHash hashes the JSON payload independently of key order and
// spacing: "the same payload" is the same JSON value.
func canonicalHash(body []byte) [32]byte {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return sha256.Sum256(body)
	}
	b, _ := json.Marshal(v)
	return sha256.Sum256(b)
}
