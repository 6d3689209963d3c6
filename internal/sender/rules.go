package sender

import (
	"time"

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
		Secrets: r.cfg.Secrets,
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
