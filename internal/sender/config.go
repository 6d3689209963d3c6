package sender

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Config configures a Pool. The daemon builds it from the `sender` section
// of configs/mailsvc.yaml (Settings.Config) and the keys of other sections
// that the pool reads (internal/app, configmap.go). The defaults below are
// those of DefaultSettings.
type Config struct {
	// Workers is the number of concurrent send workers, one provider session
	// each (default 8).
	Workers int
	// BatchSize is the most rows one claim takes (default 50). A claim never
	// takes more rows than there are idle workers, so no claimed row waits.
	BatchSize int
	// Lease is how long a claim owns a row (default 2m); it must exceed
	// SendTimeout (the daemon's config check demands a margin
	// of 10s, LeaseMargin).
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
	// OutcomeLinger is how long the completer holds a write of outcomes
	// alone for a send-started mark to share its commit (completer.linger):
	// at a low rate a worker's outcome and another worker's next mark are
	// then one commit instead of two. It delays the outcome's feedback
	// event and frees its worker as much later, never a send. 0 writes at
	// once (a Config built in code); Settings.Config sets
	// DefaultOutcomeLinger.
	OutcomeLinger time.Duration
}

// DefaultOutcomeLinger is the daemon's Config.OutcomeLinger: shorter than
// the relay's own linger after a wake-up (20 ms), so that a lingering
// outcome's event still goes out in the round the first outcome of its
// batch would have woken.
const DefaultOutcomeLinger = 5 * time.Millisecond

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

// WithDefaults returns c with every zero field set to its default: the
// default of its key (DefaultSettings), or, for a field without a key,
// the pool's own.
func (c Config) WithDefaults() Config {
	d := DefaultSettings().Config()
	def := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defInt(&c.Workers, d.Workers)
	defInt(&c.BatchSize, d.BatchSize)
	defInt(&c.MaxAttempts, d.MaxAttempts)
	if c.AmbiguousPolicy == "" {
		c.AmbiguousPolicy = d.AmbiguousPolicy
	}
	defInt(&c.AmbiguousRetries, d.AmbiguousRetries)
	defInt(&c.BreakerThreshold, d.BreakerThreshold)
	def(&c.BreakerProbe, d.BreakerProbe)
	def(&c.QuotaProbe, d.QuotaProbe)
	def(&c.SlowSendThreshold, d.SlowSendThreshold)
	defInt(&c.SlowSendWindow, d.SlowSendWindow)
	def(&c.Lease, d.Lease)
	def(&c.SendTimeout, d.SendTimeout)
	def(&c.RetryBackoff, d.RetryBackoff)
	def(&c.RetryBackoffMax, d.RetryBackoffMax)
	def(&c.PollInterval, d.PollInterval)
	def(&c.ShutdownTimeout, d.ShutdownTimeout)
	def(&c.DBTimeout, 10*time.Second)
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return c
}

// Validate reports every invalid field at once (errors.Join), in a fixed
// order, each message naming its config key. It does not demand
// LeaseMargin (tests use short leases); Settings.Check does for the
// daemon.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	c.checkShared(bad, 0)
	for _, name := range slices.Sorted(maps.Keys(c.RateLimits)) {
		if r := c.RateLimits[name]; r < 0 {
			bad(name+".rate_limit", "must be >= 0 (0 means no limit), got %g", r)
		}
	}
	if c.From == "" {
		bad("mail.from", "is required")
	}
	return errors.Join(errs...)
}
