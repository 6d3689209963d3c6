package sender

import (
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// rules are the decision rules the pool and the janitor share, so that the
// same fault gets the same verdict wherever it is noticed: a send that
// ended ambiguous in the worker, or one whose lease expired before its
// worker recorded anything.
type rules struct {
	cfg       Config
	provider  string
	window    time.Duration
	templates TemplateSettings
}

func newRules(cfg Config, prov Provider, tmpl TemplateSettings) rules {
	return rules{cfg: cfg, provider: prov.Name(), window: prov.IdempotencyWindow(), templates: tmpl}
}

// attempt returns the facts decide needs about a send of a row of
// template: sends counts it, ambiguous counts the earlier ambiguous
// outcomes, age is how long ago the row's first claim was taken.
func (r rules) attempt(template string, sends, ambiguous int, age time.Duration) attempt {
	return attempt{
		Sends: sends, MaxAttempts: r.cfg.MaxAttempts,
		Ambiguous: ambiguous, AmbiguousRetries: max(0, r.cfg.AmbiguousRetries),
		Policy: r.policy(template), Provider: r.provider, Window: r.window, Age: age,
		RetryBackoff: r.cfg.RetryBackoff, RetryBackoffMax: r.cfg.RetryBackoffMax,
		Secrets: r.cfg.Secrets, QuotaProbe: r.cfg.QuotaProbe, SuppressCodes: r.cfg.SuppressCodes,
	}
}

// policy is the ambiguous-outcome policy of a template: its own setting
// when it has a valid one, else the pool's.
func (r rules) policy(template string) mailtype.AmbiguousPolicy {
	if r.templates != nil {
		if s, err := r.templates.Settings(template); err == nil && s.AmbiguousPolicy.Valid() {
			return s.AmbiguousPolicy
		}
	}
	return r.cfg.AmbiguousPolicy
}

// maxAge is the max event age of a template's mails: its own setting when
// it has one, else the pool's (0: no limit).
func (r rules) maxAge(template string) time.Duration {
	if r.templates != nil {
		if s, err := r.templates.Settings(template); err == nil && s.MaxEventAge > 0 {
			return s.MaxEventAge
		}
	}
	return r.cfg.MaxEventAge
}

// stale returns the failed verdict of a claimed mail whose event is older
// than its max age at now, before any send: it is not handed to the
// provider (docs/contract.md, "Input", stale events). It is no attempt: nothing is
// spent or counted in mailsvc_send_attempts_total. ok is false for a mail still
// young enough; for one that was still young enough when its provider came
// back from an outage (resumed, the end of its last quota or breaker pause;
// zero for none; the provider may have been back for up to a probe
// interval before a probe found it) no longer than a max age ago: the
// outage, not the mail, made it wait; and for one whose earlier send may
// have reached a provider whose idempotency key still holds it: the same
// request again is how mailsvc learns the truth, where failing it stale
// would leave it unknown.
func (r rules) stale(m *store.ClaimedMail, now, resumed time.Time) (verdict, bool) {
	limit := r.maxAge(m.Template)
	age := now.Sub(m.OccurredAt)
	switch {
	case limit <= 0 || m.OccurredAt.IsZero() || age <= limit:
		return verdict{}, false
	case freshAtRecovery(m.OccurredAt, resumed, now, limit, r.cfg.BreakerProbe):
		return verdict{}, false
	case m.Ambiguous > 0 && r.window > 0 && now.Sub(m.FirstAttemptAt) < r.window-IdempotencyMargin:
		return verdict{}, false
	}
	msg := fmt.Sprintf("event occurred at %s, %s ago, older than the max event age %s; not sent",
		m.OccurredAt.UTC().Format(time.RFC3339), age.Round(time.Second), limit)
	return verdict{Record: store.Outcome{
		Status: mailtype.StatusFailed, IfCancelRequested: mailtype.StatusCancelled, Release: true,
		ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonStale, Error: msg,
	}}, true
}

// suppressed returns the failed verdict of a claimed mail whose recipient
// is on the suppression list (store.ClaimedMail.Suppressed, read by the
// claim itself): it is not handed to the provider, and, like a stale
// mail, spends no attempt. ok is false for a recipient not suppressed.
func suppressed(m *store.ClaimedMail) (verdict, bool) {
	if !m.Suppressed {
		return verdict{}, false
	}
	return verdict{Record: store.Outcome{
		Status: mailtype.StatusFailed, IfCancelRequested: mailtype.StatusCancelled, Release: true,
		ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonSuppressed,
		Error: "the recipient is on the suppression list (mailsvc suppression list); not sent",
	}}, true
}

// freshAtRecovery reports whether an event that occurred at occurred was at
// most limit old when its provider came back (at most probe before
// resumed), within limit before now.
func freshAtRecovery(occurred, resumed, now time.Time, limit, probe time.Duration) bool {
	return !resumed.IsZero() && !resumed.Before(occurred) && resumed.Sub(occurred) <= limit+probe && now.Sub(resumed) <= limit
}
