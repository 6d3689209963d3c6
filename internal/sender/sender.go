// Package sender is the hop from a mail row to a provider (docs/design.md,
// "State machine" and "Error classes"): a pool of workers that claim due rows in batches with
// a lease and a fencing token, send each through a Provider (SMTP or
// Resend, in the subpackages smtp and resend) under a hard deadline,
// classify the outcome and record it with a write fenced by the token, the
// feedback event in the same transaction. A Janitor ends rows whose lease
// expired for the last time and deletes finished rows after the retention
// window.
//
// The pool never holds a transaction open while it talks to a provider, and
// a worker that lost its lease can never change a row: every write after
// the claim says `status = 'sending' AND attempts = token`.
package sender

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// DedupeHeader is the mail header that carries HeaderKey(DedupeKey), so
// that a delivered copy can be matched to its row (`mailsvc mail show
// KEY`) when an operator reconciles an unknown mail. Providers must not use it (or any mail
// header) for the Resend Idempotency-Key, which is an HTTP header.
const DedupeHeader = "X-Dedupe-Key"

// HeaderKey returns key when it is printable ASCII without spaces, else
// "sha256:" + its hex SHA-256, so that an odd dedupe key can never break or
// inject a header.
func HeaderKey(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			sum := sha256.Sum256([]byte(key))
			return "sha256:" + hex.EncodeToString(sum[:])
		}
	}
	return key
}

// Message is one mail exactly as every attempt sends it: rendered once by
// the consumer and stored, so that all attempts carry identical content,
// Message-ID and idempotency key (docs/design.md, "Invariants": identical attempts).
type Message struct {
	// ID is the mail row's id: a VERP return path names the mail by it.
	ID int64
	// From is the sender address, e.g. "Cửa hàng <orders@example.com>".
	From string
	// ReplyTo is the Reply-To address, "" for none.
	ReplyTo string
	// To is the recipient address; ToName its display name, cleaned by
	// templates.DisplayName ("" for none).
	To     string
	ToName string
	// Subject, Text and HTML are the rendered content (UTF-8).
	Subject string
	Text    string
	HTML    string
	// MessageID is the RFC 5322 Message-ID with angle brackets, derived from
	// the dedupe key (mailtype.MessageID).
	MessageID string
	// DedupeKey is the mail's business key.
	DedupeKey string
	// IdempotencyKey is the row's stored mailtype.IdempotencyKey (the
	// deployment's namespace and the dedupe key): the Resend Idempotency-Key
	// HTTP header, the value of smtp.idempotency_header and of the
	// reconciliation mail header.
	IdempotencyKey string
	// Date is the Date header; the row's creation time, so that it is the
	// same on every attempt.
	Date time.Time
	// Attachments are the mail's stored files, in the event's order; none
	// for most mails.
	Attachments []Attachment
}

// Receipt is what a provider says about an accepted mail.
type Receipt struct {
	// ProviderMessageID is the provider's id of the accepted mail (Resend's
	// email id, or the SMTP server's final reply), "" when none was given.
	ProviderMessageID string
}

// Provider is a mail provider. It is safe for concurrent use; each worker
// opens its own Session.
type Provider interface {
	// Name is the provider's metric label and `provider` column value:
	// "smtp" or "resend".
	Name() string
	// IdempotencyWindow is how long after the first attempt resending the
	// same mail cannot deliver it twice (24 h for Resend's Idempotency-Key
	// and for an SMTP relay honouring smtp.idempotency_header); 0 when a
	// resend may duplicate (plain SMTP).
	IdempotencyWindow() time.Duration
	// NewSession returns a session for one worker.
	NewSession() Session
}

// Session sends mails for one worker, one at a time; it may keep a
// connection open between sends. It is not safe for concurrent use.
type Session interface {
	// Send delivers m before ctx ends; the deadline covers the whole call
	// (dial, TLS, every SMTP phase, the HTTP request). A nil error means the
	// provider accepted the mail. Otherwise the error is classified with a
	// *mailtype.Error (transient, permanent or ambiguous, and a reason); an
	// unclassified error counts as transient. A *ProviderError in the
	// chain says the failure is about the provider, not the mail (a rate
	// limit, a quota, the configuration); a *mailtype.Error with Reroutable
	// set says another provider may take the mail.
	Send(ctx context.Context, m *Message) (Receipt, error)
	// Close releases the session's connection. Safe to call twice.
	Close() error
}

// Trouble is what a failed send says about the provider, its account or
// mailsvc's configuration of it, rather than about the mail (docs/design.md,
// "Provider limits, pauses and the breaker"). The pool acts on it for every
// replica through the provider's shared state.
type Trouble string

const (
	// TroubleRateLimited: the provider refused the call for its rate limit
	// (Resend's HTTP 429 rate_limit_exceeded). The provider is paused for
	// ProviderError.After; the mail goes back to pending unspent.
	TroubleRateLimited Trouble = "rate_limited"
	// TroubleQuota: the account's sending quota is used up (Resend's HTTP
	// 429 daily_quota_exceeded or monthly_quota_exceeded, Resend API
	// reference, "Errors"); waiting seconds does not help. The provider is
	// paused with a slow probe; the mail goes back to pending unspent.
	TroubleQuota Trouble = "quota"
	// TroubleConfig: a failure of the configuration or of the provider's
	// reachability that any mail would meet: authentication refused (SMTP
	// 535, Resend 401/403), STARTTLS required but not offered, a
	// certificate that does not verify, a refused connection. Consecutive
	// ones across replicas open the circuit breaker
	// (sender.breaker_threshold).
	TroubleConfig Trouble = "config"
	// TroubleBusy: the provider refused a new session for now, before any
	// part of a mail was sent: an SMTP 4xx reply to the greeting (RFC 5321
	// §3.1 and §4.2.5: 421 "Service not available, closing transmission
	// channel"), which relays that cap connections per client give to the
	// connections above their cap. The refused worker waits before it
	// dials again. While another session of the pool is live (its last
	// send through the provider succeeded), the mail goes back to pending
	// unspent; else it is an ordinary transient failure (the relay may be
	// down).
	TroubleBusy Trouble = "busy"
	// TroubleOutage: the provider did not answer about the mail in a way
	// that any mail would meet while the provider is down: no response
	// (a connection that breaks or times out), an HTTP 5xx or 408 from
	// Resend, a relay that closes or refuses the session. One alone may be
	// the mail's own (a request too large for a timeout): it spends an
	// attempt. Consecutive ones across replicas are an outage: they count
	// towards the breaker like TroubleConfig, and from the second in a row
	// the mail goes back to pending unspent (docs/design.md, "Provider
	// outages").
	TroubleOutage Trouble = "outage"
	// TroubleInProgress: the provider still processes an earlier request
	// with the mail's idempotency key (Resend's HTTP 409
	// concurrent_idempotent_requests and resource_locked: "try the request
	// again later", Resend API reference, "Errors"). The mail goes back to
	// pending unspent for ProviderError.After, at least a second.
	TroubleInProgress Trouble = "in_progress"
)

// ProviderError marks a failed send whose cause is a Trouble. Providers
// return it around their classified *mailtype.Error, which keeps the class,
// reason and detail of the answer.
type ProviderError struct {
	Trouble Trouble
	// After is the least delay before the next call to the provider (the
	// 429's Retry-After, else ratelimit-reset); 0 when it named none.
	After time.Duration
	// Err is the classified error.
	Err error
}

func (e *ProviderError) Error() string { return e.Err.Error() }

func (e *ProviderError) Unwrap() error { return e.Err }

// TroubleOf returns the Trouble of err's chain and the delay it asked for,
// "" when err says nothing about the provider.
func TroubleOf(err error) (Trouble, time.Duration) {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Trouble, pe.After
	}
	return "", 0
}
