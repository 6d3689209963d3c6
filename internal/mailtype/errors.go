package mailtype

import (
	"errors"
	"fmt"
	"time"
)

// Class says what to do about an error (docs/design.md, "Error classes").
type Class string

const (
	// Transient errors are retried with backoff; the input is fine.
	Transient Class = "transient"
	// Permanent errors never succeed on retry: dead-letter or fail the mail.
	Permanent Class = "permanent"
	// Ambiguous errors leave it unknown whether the provider took the mail.
	Ambiguous Class = "ambiguous"
)

// Reason is a closed list of why something failed. The same values appear in
// dead-letter headers, last_error prefixes and metric labels, so the set must
// stay small and bounded.
type Reason string

// Consumer reasons: why an input event was dead-lettered or not sent.
const (
	ReasonMalformedJSON      Reason = "malformed_json"
	ReasonMissingField       Reason = "missing_field"
	ReasonInvalidField       Reason = "invalid_field"
	ReasonUnsupportedVersion Reason = "unsupported_version"
	ReasonInvalidAddress     Reason = "invalid_address"
	ReasonTooLarge           Reason = "too_large"
	ReasonMessageIDMismatch  Reason = "message_id_mismatch"
	ReasonUnknownTemplate    Reason = "unknown_template"
	ReasonRender             Reason = "render"
	ReasonStale              Reason = "stale"
	ReasonDeliveryLimit      Reason = "delivery_limit"
	// ReasonAttachment: a required attachment could not be fetched or
	// verified (the detail says which and why); the mail was never sent.
	ReasonAttachment Reason = "attachment"
)

// Sender and infrastructure reasons.
const (
	ReasonDatabase         Reason = "database"
	ReasonBroker           Reason = "broker"
	ReasonConnect          Reason = "connect"
	ReasonTLS              Reason = "tls"
	ReasonAuth             Reason = "auth"
	ReasonTimeout          Reason = "timeout"
	ReasonRejected         Reason = "rejected"
	ReasonDeferred         Reason = "deferred"
	ReasonRateLimited      Reason = "rate_limited"
	ReasonServerError      Reason = "server_error"
	ReasonIdempotencyReuse Reason = "idempotency_conflict"
	ReasonAttemptsExceeded Reason = "attempts_exhausted"
	ReasonLeaseExpired     Reason = "lease_expired"
	// ReasonSuppressed: the recipient is on the suppression list (a
	// permanent bounce, a complaint, or an operator's entry); the mail was
	// never handed to the provider.
	ReasonSuppressed Reason = "suppressed"
	// ReasonProviderFailed: the provider accepted the mail, then reported
	// that it did not send it (Resend's email.failed, e.g. its daily quota
	// was reached); the mail was not delivered.
	ReasonProviderFailed Reason = "provider_failed"
	// ReasonCancelledAmbiguous: a cancel stopped the retry of a mail whose
	// earlier send was ambiguous; it may have been delivered.
	ReasonCancelledAmbiguous Reason = "cancelled_after_ambiguous"
	ReasonUnroutable         Reason = "unroutable"
	ReasonNack               Reason = "nack"
	ReasonOther              Reason = "other"
)

// Error is an error with its classification. Classify once where the library
// error is born; everything above reads Class and Reason with errors.As.
type Error struct {
	Class  Class
	Reason Reason
	// Err is the underlying error; it may be nil.
	Err error
	// Detail is what the provider said (reply code, enhanced status code,
	// HTTP status, error name), set where a provider's error is classified;
	// zero for every other error. DetailOf reads it through a chain.
	Detail ProviderDetail
	// Reroutable is set where a provider's failure is classified when it
	// proves that the provider did not take the mail and says nothing
	// against the mail itself: a refused or failed connection, TLS or
	// authentication before MAIL FROM, a 4xx/5xx reply before DATA that
	// does not refuse a recipient, an HTTP answer that created nothing
	// (Resend's 401, 403, 429). Another provider may take such a mail
	// (sender.fallback_provider); never one whose outcome is ambiguous.
	Reroutable bool
	// After is the least delay before the mail's next attempt that the
	// provider asked for about this mail alone (an SMTP greylisting
	// reply); 0 for none. RetryAfterOf reads it through a chain.
	After time.Duration
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s (%s)", e.Reason, e.Class)
	}
	return fmt.Sprintf("%s (%s): %v", e.Reason, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// NewError returns an *Error of the given class and reason wrapping err.
func NewError(class Class, reason Reason, err error) *Error {
	return &Error{Class: class, Reason: reason, Err: err}
}

// Errorf returns an *Error whose message is formatted like fmt.Errorf.
func Errorf(class Class, reason Reason, format string, args ...any) *Error {
	return &Error{Class: class, Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of err: the class of the first *Error in its
// chain, or Transient when there is none (an unclassified error is assumed
// to be worth a retry, never a dead-letter).
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Transient
}

// ReasonOf returns the reason of the first *Error in err's chain, or
// ReasonOther.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonOther
}

// RetryAfterOf returns the After of the first *Error in err's chain, 0
// for none.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.After
	}
	return 0
}

// MessageOf returns err's text without the "reason (class): " prefix of
// the first *Error in its chain, for a record that keeps the reason and
// class in fields of their own (a mail's last_error is "reason: message").
// It is err.Error() for an error without an *Error, or whose *Error wraps
// nothing.
func MessageOf(err error) string {
	var e *Error
	if !errors.As(err, &e) || e.Err == nil {
		return err.Error()
	}
	return e.Err.Error()
}

// Reroutable reports whether the first *Error in err's chain is
// Reroutable: the provider provably did not take the mail, and another one
// may.
func Reroutable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reroutable
}
