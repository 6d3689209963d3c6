package sender

import (
	"errors"
	"slices"
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
	// Sends is the number of sends of the row, this one included (the
	// attempts spent); MaxAttempts bounds it.
	Sends       int
	MaxAttempts int
	// Ambiguous is how many earlier sends of the row ended ambiguous;
	// AmbiguousRetries is how many ambiguous outcomes the retry policy
	// resends (sender.ambiguous_retries).
	Ambiguous        int
	AmbiguousRetries int
	// Policy is the mail's ambiguous-outcome policy (template override
	// applied).
	Policy mailtype.AmbiguousPolicy
	// Provider is the provider's name; Window its idempotency window.
	Provider string
	Window   time.Duration
	// Age is how long ago the first attempt was claimed.
	Age time.Duration
	// Claims is how many times the row was claimed, this claim included
	// (its fencing token): the backoff of a retry that spent nothing grows
	// with it.
	Claims int
	// RetryBackoff and RetryBackoffMax bound the retry delay.
	RetryBackoff, RetryBackoffMax time.Duration
	// Secrets are redacted from the stored error text.
	Secrets []string
	// QuotaProbe is how long a mail waits after its provider's quota ran
	// out (sender.quota_probe_interval): until the next probe.
	QuotaProbe time.Duration
	// SuppressCodes are the enhanced codes of a permanent refusal that
	// suppresses the recipient (suppression.smtp_codes).
	SuppressCodes []string
}

// verdict is the decision about one attempt: the metric outcome and what
// to record.
type verdict struct {
	Outcome string
	Record  store.Outcome
	// refused is set when the provider refused the worker's session
	// (TroubleBusy): the worker waits before it dials again. atCap is set
	// when that was the provider's cap of sessions (reply.atCap): the mail
	// went back unspent.
	refused, atCap bool
}

// resendIsSafe reports whether sending the mail again cannot deliver it
// twice: the provider honours an idempotency key (Resend's Idempotency-Key,
// a relay reading smtp.idempotency_header) and the first attempt is young
// enough for the key to be alive.
func (a attempt) resendIsSafe() bool {
	return a.Window > 0 && a.Age < a.Window-IdempotencyMargin
}

// keyExpired reports whether an earlier send of the mail was ambiguous and
// the idempotency key that covered it has expired (or is about to): no
// further send is safe.
func (a attempt) keyExpired() bool {
	return a.Ambiguous > 0 && a.Window > 0 && !a.resendIsSafe()
}

// retryAmbiguous reports whether an ambiguous outcome is sent again:
// always while a resend is safe, never once an idempotent provider's key
// expired, else under the retry policy while the ambiguity budget lasts
// (sender.ambiguous_retries resends per mail).
func (a attempt) retryAmbiguous() bool {
	switch {
	case a.resendIsSafe():
		return true
	case a.Window > 0:
		return false
	}
	return a.Policy == mailtype.PolicyRetry && a.Ambiguous < a.AmbiguousRetries
}

// decide classifies the outcome of one send attempt (docs/design.md,
// "Error classes"). A rate limit or a used-up quota (a *ProviderError) is
// no attempt: back to pending unspent, due when the provider's pause may
// end. Transient: back to pending with exponential backoff and jitter, or
// failed once the sends are exhausted. Permanent: failed. Ambiguous: sent again after a
// backoff when retryAmbiguous and sends remain, else unknown: a mail whose
// last attempt is ambiguous ends unknown under either policy, never
// failed, since it may have been delivered. A reused idempotency key
// (Resend's 409 invalid_idempotent_request) means an earlier attempt
// reached the provider: unknown, never retried. Once any send of the mail
// was ambiguous, a later refusal or exhausted attempts end unknown too,
// not failed: the earlier send may have delivered it. A non-sent outcome
// of a mail whose cancel was requested ends cancelled instead (never
// retried), unless this or an earlier send was ambiguous: then unknown.
func decide(err error, r Receipt, a attempt) verdict {
	if err == nil {
		return verdict{Outcome: OutcomeSent, Record: store.Outcome{
			Status: mailtype.StatusSent, Provider: a.Provider, ProviderMessageID: r.ProviderMessageID}}
	}
	class, reason := mailtype.ClassOf(err), mailtype.ReasonOf(err)
	if reason == mailtype.ReasonIdempotencyReuse {
		class = mailtype.Ambiguous
	}
	rec := store.Outcome{
		Provider: a.Provider, ErrorClass: class, ErrorReason: reason,
		Error: mailtype.Sanitize(mailtype.MessageOf(err), a.Secrets...), IfCancelRequested: mailtype.StatusCancelled,
		Ambiguous: class == mailtype.Ambiguous, Detail: mailtype.DetailOf(err),
	}
	switch trouble, after := TroubleOf(err); {
	case trouble == TroubleRateLimited:
		return unspentVerdict(err, a, max(after, time.Second))
	case trouble == TroubleQuota:
		return unspentVerdict(err, a, max(after, a.QuotaProbe))
	case trouble == TroubleInProgress:
		v := unspentVerdict(err, a, max(after, time.Second))
		v.Outcome = OutcomeUnanswered
		return v
	case trouble == TroubleOutage && a.resendIsSafe():
		// The key is alive: the same request again cannot deliver twice,
		// and no answer came about the mail: sent again, unspent, until an
		// answer comes or the key is about to expire.
		return unansweredVerdict(err, a, backoff.Delay(a.Claims, a.RetryBackoff, a.RetryBackoffMax))
	}
	v := verdict{Outcome: string(class), Record: rec}
	retry := max(backoff.Delay(a.Sends, a.RetryBackoff, a.RetryBackoffMax), mailtype.RetryAfterOf(err))
	switch {
	case class == mailtype.Ambiguous:
		v.Record.IfCancelRequested = mailtype.StatusUnknown
		v.Record.Status = mailtype.StatusUnknown
		if reason != mailtype.ReasonIdempotencyReuse && a.retryAmbiguous() && a.Sends < a.MaxAttempts {
			v.Record.Status, v.Record.RetryAfter = mailtype.StatusPending, retry
		}
	case a.keyExpired():
		// The key that covered the earlier ambiguous send has expired (or
		// is about to): no further send is safe, whatever this answer.
		v.Record.Status, v.Record.IfCancelRequested = mailtype.StatusUnknown, mailtype.StatusUnknown
	case a.Ambiguous > 0 && (class == mailtype.Permanent || a.Sends >= a.MaxAttempts):
		// An earlier send may have delivered the mail: this refusal proves
		// nothing about it, so the mail ends unknown, never failed.
		v.Record.Status, v.Record.IfCancelRequested = mailtype.StatusUnknown, mailtype.StatusUnknown
	case class == mailtype.Permanent:
		v.Record.Status = mailtype.StatusFailed
	case a.Sends >= a.MaxAttempts:
		v.Record.Status = mailtype.StatusFailed
		// The message keeps the last error with its own reason.
		v.Record.ErrorClass, v.Record.ErrorReason = mailtype.Permanent, mailtype.ReasonAttemptsExceeded
		v.Record.Error = string(reason) + ": " + rec.Error
	default:
		v.Record.Status, v.Record.RetryAfter = mailtype.StatusPending, retry
	}
	if a.Ambiguous > 0 && v.Record.IfCancelRequested == mailtype.StatusCancelled {
		v.Record.IfCancelRequested = mailtype.StatusUnknown // it may have been delivered
	}
	// A permanent refusal of the recipient proves the address bad whatever
	// the mail's end (an earlier ambiguous send may still have delivered
	// it); a 4.x.x reply never suppresses.
	v.Record.Suppress = class == mailtype.Permanent && slices.Contains(a.SuppressCodes, rec.Detail.SMTPEnhancedCode)
	return v
}

// OutcomeThrottled is the verdict outcome of a send the provider refused
// for its rate limit or quota: not an attempt (the mail goes back to
// pending unspent), counted in mailsvc_provider_throttled_total instead of
// mailsvc_send_attempts_total.
const OutcomeThrottled = "throttled"

// unspentVerdict ends a send that the provider refused before taking the
// mail, for a reason that is not the mail's (a rate limit, a quota, a
// failed probe): back to pending after retry, with the error as
// last_error, and the send not counted (store.Outcome.Release undoes the
// mark). A cancel requested meanwhile ends it cancelled, or unknown after
// an earlier ambiguous send.
func unspentVerdict(err error, a attempt, retry time.Duration) verdict {
	v := verdict{Outcome: OutcomeThrottled, Record: store.Outcome{
		Status: mailtype.StatusPending, RetryAfter: retry, Release: true, IfCancelRequested: mailtype.StatusCancelled,
		ErrorClass: mailtype.ClassOf(err), ErrorReason: mailtype.ReasonOf(err),
		Error: mailtype.Sanitize(mailtype.MessageOf(err), a.Secrets...), Detail: mailtype.DetailOf(err),
	}}
	if a.Ambiguous > 0 {
		v.Record.IfCancelRequested = mailtype.StatusUnknown
	}
	return v
}

// unansweredVerdict ends a send the provider did not answer about the mail
// (sender.TroubleOutage) while a resend is safe: back to pending after
// retry, unspent, as unspentVerdict; a send that may have reached the
// provider (ambiguous) still counts as an ambiguous outcome through the
// provider that made it, so that a later end without a safe resend is
// unknown, never failed, and the resend goes to the same provider.
func unansweredVerdict(err error, a attempt, retry time.Duration) verdict {
	v := unspentVerdict(err, a, retry)
	v.Outcome = OutcomeUnanswered
	if mailtype.ClassOf(err) == mailtype.Ambiguous {
		v.Record.Ambiguous, v.Record.Provider = true, a.Provider
		v.Record.IfCancelRequested = mailtype.StatusUnknown
	}
	return v
}

// OutcomeUnanswered is the verdict outcome of a send that met a provider
// outage (sender.TroubleOutage, sender.TroubleConfig) or an earlier
// request still in progress, and went back to pending unspent: counted in
// mailsvc_sends_unspent_total, not mailsvc_send_attempts_total.
const OutcomeUnanswered = "unanswered"

// deferVerdict ends a claim that no provider may take now (every route is
// paused): back to pending unspent, due after retry.
func deferVerdict(retry time.Duration) verdict {
	v := releaseVerdict()
	v.Record.RetryAfter = retry
	return v
}

// releaseVerdict ends a claim that never handed the mail to the provider
// (a stop before the send, a cancel requested while it waited): back to
// pending, due now, or cancelled with a cancel requested. Nothing is spent.
func releaseVerdict() verdict {
	return verdict{Record: store.Outcome{Status: mailtype.StatusPending,
		IfCancelRequested: mailtype.StatusCancelled, Release: true}}
}

// errLeaseExpired is the ambiguous outcome of a send whose lease expired
// before its owner recorded anything: the worker crashed, paused or lost
// the database after handing the mail over.
var errLeaseExpired = mailtype.NewError(mailtype.Ambiguous, mailtype.ReasonLeaseExpired,
	errors.New("the lease expired after the send started and before its outcome was recorded; the mail may have been delivered"))
