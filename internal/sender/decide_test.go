package sender

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

func smtpAttempt(sends int, policy mailtype.AmbiguousPolicy) attempt {
	return attempt{Sends: sends, MaxAttempts: 3, AmbiguousRetries: 1, Policy: policy, Provider: "smtp",
		RetryBackoff: time.Second, RetryBackoffMax: time.Minute}
}

func resendAttempt(sends int, age time.Duration) attempt {
	return attempt{Sends: sends, MaxAttempts: 3, AmbiguousRetries: 1, Policy: mailtype.PolicyUnknown, Provider: "resend",
		Window: 24 * time.Hour, Age: age, RetryBackoff: time.Second, RetryBackoffMax: time.Minute}
}

// withAmbiguous returns a with n earlier ambiguous outcomes.
func withAmbiguous(a attempt, n int) attempt {
	a.Ambiguous = n
	return a
}

func TestDecide(t *testing.T) {
	t.Parallel()
	transient := mailtype.NewError(mailtype.Transient, mailtype.ReasonDeferred, errors.New("451 later"))
	permanent := mailtype.NewError(mailtype.Permanent, mailtype.ReasonRejected, errors.New("550 no <b@example.com>"))
	ambiguous := mailtype.NewError(mailtype.Ambiguous, mailtype.ReasonTimeout, errors.New("no reply after DATA"))
	throttled := &ProviderError{Trouble: TroubleRateLimited, After: 10 * time.Minute, Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonRateLimited, errors.New("429"))}
	quota := &ProviderError{Trouble: TroubleQuota, Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonRateLimited, errors.New("429 daily_quota_exceeded"))}
	config := &ProviderError{Trouble: TroubleConfig, Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonAuth, errors.New("535 bad credentials"))}
	reused := mailtype.NewError(mailtype.Ambiguous, mailtype.ReasonIdempotencyReuse, errors.New("409 invalid_idempotent_request"))
	reusedAsPermanent := mailtype.NewError(mailtype.Permanent, mailtype.ReasonIdempotencyReuse, errors.New("409"))
	for _, c := range []struct {
		name     string
		err      error
		a        attempt
		status   mailtype.Status
		ifCancel mailtype.Status
		outcome  string
	}{
		{"sent", nil, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusSent, "", OutcomeSent},
		{"transient retries", transient, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeTransient},
		{"transient exhausted", transient, smtpAttempt(3, mailtype.PolicyRetry), mailtype.StatusFailed, mailtype.StatusCancelled, OutcomeTransient},
		{"unclassified is transient", errors.New("boom"), smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeTransient},
		{"permanent", permanent, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusFailed, mailtype.StatusCancelled, OutcomePermanent},
		{"ambiguous retry policy", ambiguous, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"ambiguous budget spent", ambiguous, withAmbiguous(smtpAttempt(2, mailtype.PolicyRetry), 1), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"ambiguous after a transient", ambiguous, smtpAttempt(2, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"deduping relay ignores the budget", ambiguous, withAmbiguous(func() attempt {
			a := smtpAttempt(2, mailtype.PolicyRetry)
			a.Window = 24 * time.Hour
			return a
		}(), 5), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"refused after an ambiguous send", permanent, withAmbiguous(smtpAttempt(2, mailtype.PolicyRetry), 1), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomePermanent},
		{"exhausted after an ambiguous send", transient, withAmbiguous(smtpAttempt(3, mailtype.PolicyRetry), 1), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeTransient},
		{"transient after an ambiguous send, cancel requested", transient, withAmbiguous(smtpAttempt(2, mailtype.PolicyRetry), 1), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeTransient},
		{"reused key is unknown", reused, resendAttempt(1, time.Hour), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"reused key is never failed", reusedAsPermanent, resendAttempt(1, time.Hour), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"ambiguous retry exhausted", ambiguous, smtpAttempt(3, mailtype.PolicyRetry), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"ambiguous unknown policy", ambiguous, smtpAttempt(1, mailtype.PolicyUnknown), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"resend ambiguous young", ambiguous, withAmbiguous(resendAttempt(1, time.Hour), 7), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"resend ambiguous last attempt", ambiguous, resendAttempt(3, time.Hour), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"lease expired on the last attempt", errLeaseExpired, smtpAttempt(3, mailtype.PolicyRetry), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"lease expired, unknown policy", errLeaseExpired, smtpAttempt(1, mailtype.PolicyUnknown), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"lease expired, retry policy", errLeaseExpired, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"resend ambiguous old", ambiguous, resendAttempt(1, 23*time.Hour+time.Minute), mailtype.StatusUnknown, mailtype.StatusUnknown, OutcomeAmbiguous},
		{"throttled is unspent", throttled, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeThrottled},
		{"throttled on the last attempt is unspent", throttled, smtpAttempt(3, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeThrottled},
		{"quota is unspent", quota, resendAttempt(3, time.Hour), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeThrottled},
		{"throttled after an ambiguous send", throttled, withAmbiguous(smtpAttempt(2, mailtype.PolicyRetry), 1), mailtype.StatusPending, mailtype.StatusUnknown, OutcomeThrottled},
		{"a configuration failure is an attempt", config, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending, mailtype.StatusCancelled, OutcomeTransient},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := decide(c.err, Receipt{ProviderMessageID: "id-1"}, c.a)
			require.Equal(t, c.status, v.Record.Status)
			require.Equal(t, c.ifCancel, v.Record.IfCancelRequested)
			require.Equal(t, c.outcome, v.Outcome)
			if c.outcome == OutcomeThrottled {
				require.True(t, v.Record.Release, "not an attempt: the mark is undone")
			} else {
				require.Equal(t, c.a.Provider, v.Record.Provider)
			}
			require.NotContains(t, v.Record.Error, "b@example.com")
			require.Equal(t, c.outcome == OutcomeAmbiguous, v.Record.Ambiguous, "counted against the ambiguity budget")
		})
	}
}

func TestDecideDelays(t *testing.T) {
	t.Parallel()
	transient := mailtype.NewError(mailtype.Transient, mailtype.ReasonDeferred, errors.New("451"))
	for token := 1; token <= 2; token++ {
		v := decide(transient, Receipt{}, smtpAttempt(token, mailtype.PolicyRetry))
		ceiling := time.Second << (token - 1)
		require.GreaterOrEqual(t, v.Record.RetryAfter, ceiling/2)
		require.LessOrEqual(t, v.Record.RetryAfter, ceiling)
	}
	throttled := &ProviderError{Trouble: TroubleRateLimited, After: 10 * time.Minute, Err: transient}
	v := decide(throttled, Receipt{}, smtpAttempt(1, mailtype.PolicyRetry))
	require.Equal(t, 10*time.Minute, v.Record.RetryAfter, "due when the provider's pause ends")
	quota := &ProviderError{Trouble: TroubleQuota, Err: transient}
	a := smtpAttempt(1, mailtype.PolicyRetry)
	a.QuotaProbe = 5 * time.Minute
	require.Equal(t, 5*time.Minute, decide(quota, Receipt{}, a).Record.RetryAfter, "a quota waits for the next probe")

	exhausted := decide(transient, Receipt{}, smtpAttempt(3, mailtype.PolicyRetry))
	require.Equal(t, mailtype.ReasonAttemptsExceeded, exhausted.Record.ErrorReason)
	require.Equal(t, "deferred: 451", exhausted.Record.Error, "the last error keeps its own reason, once")
}

func TestReleaseVerdictSpendsNothing(t *testing.T) {
	t.Parallel()
	v := releaseVerdict()
	require.True(t, v.Record.Release)
	require.False(t, v.Record.Ambiguous)
	require.Equal(t, mailtype.StatusPending, v.Record.Status)
	require.Equal(t, mailtype.StatusCancelled, v.Record.IfCancelRequested)
	require.Zero(t, v.Record.RetryAfter)
}

// TestDecideKeepsProviderDetail: the provider's detail goes with the
// error fields into the outcome, whatever the verdict, the throttle's
// wrapper and a reclassification to attempts_exhausted included.
func TestDecideKeepsProviderDetail(t *testing.T) {
	t.Parallel()
	rejected := mailtype.NewError(mailtype.Permanent, mailtype.ReasonRejected, errors.New("550 5.1.1 user unknown"))
	rejected.Detail = mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}
	deferred := mailtype.NewError(mailtype.Transient, mailtype.ReasonDeferred, errors.New("451 4.7.1 later"))
	deferred.Detail = mailtype.ProviderDetail{SMTPCode: 451, SMTPEnhancedCode: "4.7.1"}
	limited := mailtype.NewError(mailtype.Transient, mailtype.ReasonRateLimited, errors.New("429"))
	limited.Detail = mailtype.ProviderDetail{HTTPStatus: 429, ErrorName: "rate_limit_exceeded"}
	for _, c := range []struct {
		name   string
		err    error
		a      attempt
		status mailtype.Status
	}{
		{"failed", rejected, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusFailed},
		{"unknown after an ambiguous send", rejected, withAmbiguous(smtpAttempt(2, mailtype.PolicyRetry), 1), mailtype.StatusUnknown},
		{"attempts exhausted", deferred, smtpAttempt(3, mailtype.PolicyRetry), mailtype.StatusFailed},
		{"retried", deferred, smtpAttempt(1, mailtype.PolicyRetry), mailtype.StatusPending},
		{"throttled, unspent", &ProviderError{Trouble: TroubleRateLimited, After: time.Second, Err: limited}, resendAttempt(3, time.Hour), mailtype.StatusPending},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := decide(c.err, Receipt{}, c.a)
			require.Equal(t, c.status, v.Record.Status)
			require.Equal(t, mailtype.DetailOf(c.err), v.Record.Detail)
			require.False(t, v.Record.Detail.IsZero())
		})
	}
	require.True(t, decide(nil, Receipt{}, smtpAttempt(1, mailtype.PolicyRetry)).Record.Detail.IsZero())
	require.True(t, decide(errLeaseExpired, Receipt{}, smtpAttempt(3, mailtype.PolicyRetry)).Record.Detail.IsZero())
}

// TestUnansweredInsideTheKeyWindow: a Resend request that got no answer
// (sender.TroubleOutage) is sent again unspent while the key lives,
// counted as ambiguous when it was written, whatever the attempts spent;
// once the key is about to expire it ends unknown as before.
func TestUnansweredInsideTheKeyWindow(t *testing.T) {
	t.Parallel()
	lost := &ProviderError{Trouble: TroubleOutage, Err: mailtype.NewError(mailtype.Ambiguous, mailtype.ReasonConnect, errors.New("EOF"))}
	unsent := &ProviderError{Trouble: TroubleOutage, Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonServerError, errors.New("500"))}

	v := decide(lost, Receipt{}, withAmbiguous(resendAttempt(3, 22*time.Hour), 7))
	require.Equal(t, OutcomeUnanswered, v.Outcome)
	require.True(t, v.Record.Release, "unspent")
	require.True(t, v.Record.Ambiguous, "the request was written: it may have been sent")
	require.Equal(t, "resend", v.Record.Provider, "a resend goes to the provider that may have it")
	require.Equal(t, mailtype.StatusPending, v.Record.Status)
	require.Equal(t, mailtype.StatusUnknown, v.Record.IfCancelRequested)
	require.Equal(t, "EOF", v.Record.Error, "the reason is not repeated in the message")

	v = decide(unsent, Receipt{}, resendAttempt(3, time.Hour))
	require.Equal(t, OutcomeUnanswered, v.Outcome)
	require.False(t, v.Record.Ambiguous)
	require.Equal(t, mailtype.StatusCancelled, v.Record.IfCancelRequested)

	v = decide(lost, Receipt{}, resendAttempt(1, 23*time.Hour+time.Minute))
	require.Equal(t, mailtype.StatusUnknown, v.Record.Status, "the key is about to expire: no safe resend")
	require.False(t, v.Record.Release)

	v = decide(unsent, Receipt{}, resendAttempt(3, 23*time.Hour+time.Minute))
	require.Equal(t, mailtype.StatusFailed, v.Record.Status, "past the window a 5xx spends, and exhausts")
	v = decide(unsent, Receipt{}, withAmbiguous(resendAttempt(1, 23*time.Hour+30*time.Minute), 1))
	require.Equal(t, mailtype.StatusUnknown, v.Record.Status, "an earlier ambiguous send whose key expired: no further send")

	inProgress := &ProviderError{Trouble: TroubleInProgress, After: 2 * time.Second,
		Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonDeferred, errors.New("409"))}
	v = decide(inProgress, Receipt{}, resendAttempt(3, time.Hour))
	require.True(t, v.Record.Release)
	require.Equal(t, 2*time.Second, v.Record.RetryAfter)
}

// TestStaleCountsFromTheProviderResuming: a mail whose event was fresh
// when its provider came back from an outage is sent, not failed stale,
// while that recovery is at most a max age ago.
func TestStaleCountsFromTheProviderResuming(t *testing.T) {
	t.Parallel()
	r := rules{cfg: Config{MaxEventAge: 20 * time.Second}}
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	m := &store.ClaimedMail{OccurredAt: t0}
	for _, c := range []struct {
		name         string
		now, resumed time.Time
		stale        bool
	}{
		{"young", t0.Add(10 * time.Second), time.Time{}, false},
		{"old, no outage", t0.Add(30 * time.Second), time.Time{}, true},
		{"fresh when the relay came back", t0.Add(30 * time.Second), t0.Add(15 * time.Second), false},
		{"already stale when it came back", t0.Add(30 * time.Second), t0.Add(25 * time.Second), true},
		{"the recovery came before the event", t0.Add(30 * time.Second), t0.Add(-time.Second), true},
		{"the recovery is over a max age ago", t0.Add(40 * time.Second), t0.Add(15 * time.Second), true},
	} {
		_, stale := r.stale(m, c.now, c.resumed)
		require.Equal(t, c.stale, stale, c.name)
	}
	r.cfg.BreakerProbe = 10 * time.Second
	_, stale := r.stale(m, t0.Add(30*time.Second), t0.Add(25*time.Second))
	require.False(t, stale, "the relay may have been back a probe interval before the probe found it")

	// An ambiguous earlier send under a live key is sent again (a replay):
	// failing it stale would leave it unknown.
	r = rules{cfg: Config{MaxEventAge: 20 * time.Second}, window: 24 * time.Hour}
	amb := &store.ClaimedMail{OccurredAt: t0, FirstAttemptAt: t0, Ambiguous: 1}
	_, stale = r.stale(amb, t0.Add(time.Hour), time.Time{})
	require.False(t, stale)
	_, stale = r.stale(amb, t0.Add(23*time.Hour+time.Minute), time.Time{})
	require.True(t, stale, "past the window no resend is safe")
}
