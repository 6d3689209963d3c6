package sender

import (
	"errors"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// IdempotencyMargin is subtracted from a provider's idempotency window
// before a resend counts as safe: a retry that starts at 23h59m may reach
// the provider after the key expired.
const IdempotencyMargin = time.Hour

// attempt is what decide needs to know about the attempt besides its
// error: the facts of the row and the rules that apply to it.
type attempt struct {
	// Token is the attempt number (the fencing token).
	Token       int
	MaxAttempts int
	// Policy is the mail's ambiguous-outcome policy (template override
	// applied).
	Policy mailtype.AmbiguousPolicy
	// Provider is the provider's name; Window its idempotency window.
	Provider string
	Window   time.Duration
	// Age is how long ago the first attempt was claimed.
	Age time.Duration
	// RetryBackoff and RetryBackoffMax bound the retry delay.
	RetryBackoff, RetryBackoffMax time.Duration
	// Secrets are redacted from the stored error text.
	Secrets []string
}

// verdict is the decision about one attempt: the metric outcome, what to
// record, and how long the provider asked everyone to wait.
type verdict struct {
	Outcome  string
	Record   store.Outcome
	Throttle time.Duration
}

// resendIsSafe reports whether sending the mail again cannot deliver it
// twice: the provider honours an idempotency key and the first attempt is
// young enough for the key to be alive.
func (a attempt) resendIsSafe() bool {
	return a.Window > 0 && a.Age < a.Window-IdempotencyMargin
}

// retryAmbiguous reports whether an ambiguous outcome is retried: always
// while a resend is safe (Resend within 24 h), else by the policy.
func (a attempt) retryAmbiguous() bool {
	return a.resendIsSafe() || (a.Window == 0 && a.Policy == mailtype.PolicyRetry)
}

// decide classifies the outcome of one send attempt (DESIGN.md section 6).
// Transient: back to pending with exponential backoff and jitter (at least
// the provider's Retry-After), or failed once attempts are exhausted.
// Permanent: failed. Ambiguous: retried like a transient error when
// retryAmbiguous, else unknown; exhausted attempts end unknown too, since
// the mail may have gone. Any non-sent outcome of a mail whose cancel was
// requested ends cancelled instead (never retried), except unknown, which
// stays unknown because the mail may have gone.
func decide(err error, r Receipt, a attempt) verdict {
	if err == nil {
		return verdict{Outcome: OutcomeSent, Record: store.Outcome{
			Status: mailtype.StatusSent, Provider: a.Provider, ProviderMessageID: r.ProviderMessageID}}
	}
	class := mailtype.ClassOf(err)
	rec := store.Outcome{
		Provider: a.Provider, ErrorClass: class, ErrorReason: mailtype.ReasonOf(err),
		Error: mailtype.Sanitize(err.Error(), a.Secrets...), IfCancelRequested: mailtype.StatusCancelled,
	}
	v := verdict{Outcome: string(class), Record: rec}
	var te *ThrottleError
	if errors.As(err, &te) {
		v.Throttle = te.After
	}
	switch {
	case class == mailtype.Permanent:
		v.Record.Status = mailtype.StatusFailed
	case class == mailtype.Ambiguous && !a.retryAmbiguous():
		v.Record.Status, v.Record.IfCancelRequested = mailtype.StatusUnknown, mailtype.StatusUnknown
	case a.Token >= a.MaxAttempts && class == mailtype.Ambiguous:
		v.Record.Status, v.Record.IfCancelRequested = mailtype.StatusUnknown, mailtype.StatusUnknown
	case a.Token >= a.MaxAttempts:
		v.Record.Status = mailtype.StatusFailed
		// The message keeps the last error with its own reason.
		v.Record.ErrorClass, v.Record.ErrorReason = mailtype.Permanent, mailtype.ReasonAttemptsExceeded
	default:
		v.Record.Status = mailtype.StatusPending
		v.Record.RetryAfter = max(backoff.Delay(a.Token, a.RetryBackoff, a.RetryBackoffMax), v.Throttle)
	}
	return v
}

// reclaimVerdict decides, before sending, about a row whose previous
// attempt ended without an outcome (its lease expired: the worker crashed
// or stopped mid-send). Whether that attempt reached the provider is
// unknown, so the row is resent only where a resend may be: the policy is
// retry, or the provider's idempotency key is still alive. Otherwise it
// becomes unknown without sending (at-most-once, DESIGN.md invariant 9).
func reclaimVerdict(a attempt) (verdict, bool) {
	if a.retryAmbiguous() {
		return verdict{}, false
	}
	return verdict{Outcome: OutcomeAmbiguous, Record: store.Outcome{
		Status: mailtype.StatusUnknown, IfCancelRequested: mailtype.StatusUnknown, Provider: a.Provider,
		ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonLeaseExpired,
		Error: "the previous attempt ended without an outcome; not resent under the unknown policy",
	}}, true
}
