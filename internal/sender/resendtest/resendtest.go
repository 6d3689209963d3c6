// Package resendtest is a local stand-in for the Resend API (POST /emails)
// on httptest, implementing the documented idempotency rules (Resend
// documentation, "Idempotency Keys"): a key lives 24 hours; the same key
// with the same payload returns the first response without sending again;
// the same key with another payload is 409 invalid_idempotent_request; a
// request while another with the same key is in progress is 409
// concurrent_idempotent_requests; keys are 1-256 characters (400
// invalid_idempotency_key). Faults can be scripted: 429 with Retry-After
// and rate-limit headers, 500, 422, any status with a given error name, and
// a response lost after the mail was sent. It records every request and every mail it sent.
package resendtest

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
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
	lose       bool
	hold       <-chan struct{}
}

// RateLimited answers 429 with Retry-After: seconds and rate-limit
// headers; nothing is sent and the key is not remembered.
func RateLimited(seconds int) Fault {
	return Fault{status: http.StatusTooManyRequests, retryAfter: seconds}
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
}

// Request is one request the stand-in received.
type Request struct {
	IdempotencyKey string
	Status         int
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
	keys     map[string]*entry
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

// Inject queues faults for the next requests, in order.
func (s *Server) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
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

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || strings.TrimSuffix(r.URL.Path, "/") != "/emails" {
		writeError(w, http.StatusNotFound, "not_found", "unknown endpoint")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.APIKey {
		writeError(w, http.StatusUnauthorized, "missing_api_key", "invalid API key")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if _, ok := r.Header["Idempotency-Key"]; ok && (len(key) < 1 || len(key) > 256) {
		s.answer(w, key, http.StatusBadRequest, errorBody("invalid_idempotency_key", "key must be 1-256 characters"), false)
		return
	}
	var req struct {
		From    string            `json:"from"`
		To      []string          `json:"to"`
		Subject string            `json:"subject"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.From == "" || len(req.To) == 0 || req.Subject == "" {
		s.answer(w, key, http.StatusUnprocessableEntity, errorBody("validation_error", "from, to and subject are required"), false)
		return
	}
	s.handle(w, key, body, req.Headers)
}

// handle applies the idempotency rules, then a fault or a send.
func (s *Server) handle(w http.ResponseWriter, key string, body []byte, headers map[string]string) {
	hash := canonicalHash(body)
	s.mu.Lock()
	if key != "" {
		if e, ok := s.keys[key]; ok && time.Since(e.at) < KeyLifetime {
			switch {
			case e.inFlight:
				s.mu.Unlock()
				s.answer(w, key, http.StatusConflict, errorBody("concurrent_idempotent_requests", "a request with this key is in progress"), false)
			case e.hash != hash:
				s.mu.Unlock()
				s.answer(w, key, http.StatusConflict, errorBody("invalid_idempotent_request", "this key was used with another payload"), false)
			default:
				st, b := e.status, e.body
				s.mu.Unlock()
				s.answer(w, key, st, b, true)
			}
			return
		}
		s.keys[key] = &entry{hash: hash, at: time.Now(), inFlight: true}
	}
	var f Fault
	if len(s.faults) > 0 {
		f, s.faults = s.faults[0], s.faults[1:]
	}
	s.mu.Unlock()
	s.process(w, key, body, headers, f)
}

func (s *Server) process(w http.ResponseWriter, key string, body []byte, headers map[string]string, f Fault) {
	if f.status != 0 {
		s.forget(key)
		if f.status == http.StatusTooManyRequests {
			h := w.Header()
			h.Set("Retry-After", fmt.Sprint(f.retryAfter))
			h.Set("ratelimit-limit", "2")
			h.Set("ratelimit-remaining", "0")
			h.Set("ratelimit-reset", fmt.Sprint(f.retryAfter))
			s.answer(w, key, f.status, errorBody(cmp.Or(f.name, "rate_limit_exceeded"), "too many requests"), false)
			return
		}
		name := "internal_server_error"
		if f.status == http.StatusUnprocessableEntity {
			name = "validation_error"
		}
		s.answer(w, key, f.status, errorBody(cmp.Or(f.name, name), "injected"), false)
		return
	}
	if f.hold != nil {
		<-f.hold
	}
	id := uuid.NewString()
	resp, _ := json.Marshal(map[string]string{"id": id})
	s.mu.Lock()
	s.sent = append(s.sent, Email{ID: id, IdempotencyKey: key, Payload: body, Headers: headers})
	if e := s.keys[key]; key != "" && e != nil {
		e.inFlight, e.status, e.body = false, http.StatusOK, resp
	}
	s.mu.Unlock()
	if f.lose {
		s.record(key, 0, false)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	s.answer(w, key, http.StatusOK, resp, false)
}

func (s *Server) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

func (s *Server) record(key string, status int, replayed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{IdempotencyKey: key, Status: status, Replayed: replayed})
}

func (s *Server) answer(w http.ResponseWriter, key string, status int, body []byte, replayed bool) {
	s.record(key, status, replayed)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, name, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(name, msg))
}

func errorBody(name, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"statusCode": 0, "name": name, "message": msg})
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
