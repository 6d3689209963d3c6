package sender

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Config configures a Pool. The keys are those of the `sender` section of
// configs/mailsvc.yaml; the daemon copies them (internal/app, configmap.go).
type Config struct {
	// Workers is the number of concurrent send workers, one provider session
	// each (default 8).
	Workers int
	// BatchSize is the most rows one claim takes (default 50). A claim never
	// takes more rows than there are idle workers, so no claimed row waits.
	BatchSize int
	// Lease is how long a claim owns a row (default 2m); it must exceed
	// SendTimeout (the daemon's config check demands a margin
	// of 10s, config.LeaseMargin).
	Lease time.Duration
	// SendTimeout is the hard deadline around one whole provider call
	// (default 30s).
	SendTimeout time.Duration
	// MaxAttempts is the number of sends started before a mail fails
	// (default 8); a claim that never handed the mail to the provider spends
	// none, a send whose lease expired spends one.
	MaxAttempts int
	// AmbiguousPolicy is what an ambiguous SMTP outcome leads to (default
	// retry); a template's setting overrides it.
	AmbiguousPolicy mailtype.AmbiguousPolicy
	// AmbiguousRetries is how many resends the retry policy makes after
	// ambiguous outcomes of one mail before the next ambiguous outcome ends
	// it unknown (sender.ambiguous_retries; default 1, NoAmbiguousRetries
	// for none). It does not apply where a resend cannot duplicate (the
	// provider's IdempotencyWindow).
	AmbiguousRetries int
	// RetryBackoff and RetryBackoffMax are the first and largest delay
	// between attempts (defaults 5s and 30m; exponential with jitter).
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// RateLimit is the most provider calls per second of this pool alone
	// (sender.rate_limit); 0 means no limit. Tokens are taken before a
	// claim, never after. The provider's own limit is RateLimits.
	RateLimit float64
	// RateLimits is each provider's rate limit for the whole deployment, in
	// sends per second, shared by every replica through PostgreSQL
	// (resend.rate_limit, smtp.rate_limit; docs/design.md, "Provider
	// limits, pauses and the breaker"). A provider absent or at 0 has none,
	// and then costs no database round trip per mail.
	RateLimits map[string]float64
	// BreakerThreshold is how many configuration failures in a row, across
	// every replica, open a provider's circuit breaker
	// (sender.breaker_threshold, default 3).
	BreakerThreshold int
	// BreakerProbe is the time between two probe sends while a breaker is
	// open (sender.breaker_probe_interval, default 30s).
	BreakerProbe time.Duration
	// QuotaProbe is the time between two probe sends while a provider's
	// sending quota is used up (sender.quota_probe_interval, default 5m).
	QuotaProbe time.Duration
	// SlowSendThreshold is the p90 of a provider's recent sends over which
	// the latency guard counts it slow (sender.slow_send_threshold,
	// default 5s; NoSlowSendGuard turns the guard off): it then takes at
	// most SlowSendConcurrency sends at once, and the fallback takes the
	// mails it may (docs/design.md, "The latency guard"). A threshold at
	// or above SendTimeout never engages: no send lasts longer.
	SlowSendThreshold time.Duration
	// SlowSendWindow is how many recent sends of a provider the p90 is
	// taken over (sender.slow_send_window, default 20); the guard judges
	// from min(5, SlowSendWindow) sends on.
	SlowSendWindow int
	// SlowSendConcurrency is the most sends at once to a slow provider
	// (sender.slow_send_concurrency). 0, the default, means
	// max(1, Workers/4) with a fallback provider and Workers (no limit:
	// the guard only reports) without one; see slowLimit.
	SlowSendConcurrency int
	// PriorityWeight is how many priority-lane mails the dispatcher claims
	// per bulk mail while both lanes have due mails
	// (sender.priority_weight, default 4: 4:1); 0 is strict priority (the
	// priority lane always first; the bulk lane waits while it has mails).
	PriorityWeight int
	// SuppressCodes are the enhanced status codes (RFC 3463, "5.1.1") of a
	// permanent refusal that puts the recipient on the suppression list
	// (suppression.smtp_codes); nil suppresses on none.
	SuppressCodes []string
	// PollInterval is how often an idle pool looks for due rows when no
	// wake-up arrives (default 1s): the safety net across replicas.
	PollInterval time.Duration
	// ShutdownTimeout is how long Stop lets in-flight sends finish before it
	// cancels them (default 20s); Stop's context may cut it shorter.
	ShutdownTimeout time.Duration
	// From is the sender address of every mail (mail.from); required.
	From string
	// WorkerID names this process in locked_by; default "hostname/pid".
	WorkerID string
	// DBTimeout bounds each database statement of the pool (default 10s).
	DBTimeout time.Duration
	// MaxEventAge is the default max event age (mail.max_event_age): a mail
	// whose event occurred longer ago is not handed to the provider but
	// fails with reason stale, as at ingest. A template's max_event_age
	// overrides it; 0 means no limit.
	MaxEventAge time.Duration
	// OutcomeLevel is the level of the line logged for each mail that
	// ended sent or cancelled (log.mail_outcomes; the zero value is
	// slog.LevelInfo). A mail that ended failed or unknown is logged at
	// warn whatever it says (error for an idempotency key reused with
	// another payload, a bug).
	OutcomeLevel slog.Level
	// Secrets are redacted from every error text the pool stores in
	// last_error, writes into a feedback event or logs: a provider may echo
	// a credential in a reply (the daemon sets the SMTP password, the Resend
	// API key and the database password).
	Secrets []string
}

// NoAmbiguousRetries is Config.AmbiguousRetries for "no resend after an
// ambiguous outcome" (sender.ambiguous_retries: 0), since 0 means the
// default.
const NoAmbiguousRetries = -1

// NoSlowSendGuard is Config.SlowSendThreshold for "no latency guard"
// (sender.slow_send_threshold: 0), since 0 means the default.
const NoSlowSendGuard = -1

// DefaultSlowSendConcurrency is the limit of a slow provider's sends at
// once for workers send workers when a fallback provider is configured and
// Config.SlowSendConcurrency is 0: a quarter of them, at least 1.
func DefaultSlowSendConcurrency(workers int) int { return max(1, workers/4) }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.BatchSize == 0 {
		c.BatchSize = 50
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 8
	}
	if c.AmbiguousPolicy == "" {
		c.AmbiguousPolicy = mailtype.PolicyRetry
	}
	if c.AmbiguousRetries == 0 {
		c.AmbiguousRetries = 1
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = 3
	}
	def(&c.BreakerProbe, 30*time.Second)
	def(&c.QuotaProbe, 5*time.Minute)
	def(&c.SlowSendThreshold, 5*time.Second)
	if c.SlowSendWindow == 0 {
		c.SlowSendWindow = 20
	}
	def(&c.Lease, 2*time.Minute)
	def(&c.SendTimeout, 30*time.Second)
	def(&c.RetryBackoff, 5*time.Second)
	def(&c.RetryBackoffMax, 30*time.Minute)
	def(&c.PollInterval, time.Second)
	def(&c.ShutdownTimeout, 20*time.Second)
	def(&c.DBTimeout, 10*time.Second)
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return c
}

// Validate reports every invalid field at once (errors.Join), each message
// naming its config key. It does not demand config.LeaseMargin (tests use
// short leases); internal/config does for the daemon.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	for key, n := range map[string]int{"sender.workers": c.Workers, "sender.batch_size": c.BatchSize, "sender.max_attempts": c.MaxAttempts} {
		if n <= 0 {
			bad(key, "must be positive, got %d", n)
		}
	}
	if !c.AmbiguousPolicy.Valid() {
		bad("sender.ambiguous_policy", "must be retry or unknown, got %q", c.AmbiguousPolicy)
	}
	if c.Lease <= c.SendTimeout {
		bad("sender.lease", "(%s) must exceed sender.send_timeout (%s)", c.Lease, c.SendTimeout)
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		bad("sender.retry_backoff_max", "(%s) must be at least sender.retry_backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	}
	if c.RateLimit < 0 {
		bad("sender.rate_limit", "must be >= 0 (0 means no limit)")
	}
	for name, r := range c.RateLimits {
		if r < 0 {
			bad(name+".rate_limit", "must be >= 0 (0 means no limit), got %g", r)
		}
	}
	if c.BreakerThreshold < 1 {
		bad("sender.breaker_threshold", "must be at least 1, got %d", c.BreakerThreshold)
	}
	if c.BreakerProbe <= 0 || c.QuotaProbe <= 0 {
		bad("sender.breaker_probe_interval", "and sender.quota_probe_interval must be positive, got %s and %s", c.BreakerProbe, c.QuotaProbe)
	}
	if c.SlowSendThreshold < 0 && c.SlowSendThreshold != NoSlowSendGuard {
		bad("sender.slow_send_threshold", "must be >= 0 (0 means no latency guard), got %s", c.SlowSendThreshold)
	}
	if c.SlowSendWindow < 1 {
		bad("sender.slow_send_window", "must be positive, got %d", c.SlowSendWindow)
	}
	if c.SlowSendConcurrency < 0 {
		bad("sender.slow_send_concurrency", "must be >= 0 (0: a quarter of the workers with a fallback provider, no limit without one), got %d", c.SlowSendConcurrency)
	}
	if c.PriorityWeight < 0 {
		bad("sender.priority_weight", "must be >= 0 (0: strict priority), got %d", c.PriorityWeight)
	}
	if c.From == "" {
		bad("mail.from", "is required")
	}
	return errors.Join(errs...)
}
