package sender

import (
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Settings is the `sender` section of configs/mailsvc.yaml, as the
// configuration file spells it: the mapstructure and yaml names are the
// keys (sender.workers, ...). internal/config decodes the section into it;
// DefaultSettings holds its defaults, Check its rules and Config maps it
// onto the pool's Config. It is written here once, with the pool it
// configures.
type Settings struct {
	// Provider is "smtp" or "resend".
	Provider string `mapstructure:"provider" yaml:"provider"`
	// Workers is the number of concurrent send workers, each with its own
	// provider session (one SMTP connection each). It bounds the group
	// commit too: a worker waits for its outcome to commit before its next
	// send, so one transaction records at most Workers outcomes. More
	// than the relay's limit of connections per client costs attempts: a
	// refused connection is a failed send.
	Workers int `mapstructure:"workers" yaml:"workers"`
	// BatchSize is the most rows one claim takes.
	BatchSize int `mapstructure:"batch_size" yaml:"batch_size"`
	// Lease is how long a claim owns a row; it must exceed SendTimeout by
	// at least LeaseMargin.
	Lease time.Duration `mapstructure:"lease" yaml:"lease"`
	// SendTimeout is the hard deadline around one whole provider call.
	SendTimeout time.Duration `mapstructure:"send_timeout" yaml:"send_timeout"`
	// MaxAttempts is the number of sends started before a mail fails; a
	// claim that never handed the mail to the provider spends none.
	MaxAttempts int `mapstructure:"max_attempts" yaml:"max_attempts"`
	// AmbiguousPolicy is "retry" or "unknown"; templates may override it.
	AmbiguousPolicy string `mapstructure:"ambiguous_policy" yaml:"ambiguous_policy"`
	// AmbiguousRetries is how many resends the retry policy allows after
	// ambiguous outcomes of one mail; the next ambiguous outcome ends
	// unknown. Not applied where a resend cannot duplicate (Resend within
	// its 24 h key window, an SMTP relay honouring smtp.idempotency_header).
	AmbiguousRetries int `mapstructure:"ambiguous_retries" yaml:"ambiguous_retries"`
	// RetryBackoff and RetryBackoffMax are the first and largest delay
	// between attempts (exponential, with jitter).
	RetryBackoff    time.Duration `mapstructure:"retry_backoff" yaml:"retry_backoff"`
	RetryBackoffMax time.Duration `mapstructure:"retry_backoff_max" yaml:"retry_backoff_max"`
	// RateLimit is the most provider calls per second across this
	// process's workers; 0 means no limit.
	RateLimit float64 `mapstructure:"rate_limit" yaml:"rate_limit"`
	// PollInterval is how often idle workers look for due rows when no
	// in-process wake-up arrives.
	PollInterval time.Duration `mapstructure:"poll_interval" yaml:"poll_interval"`
	// ShutdownTimeout is how long in-flight sends may finish on SIGTERM.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" yaml:"shutdown_timeout"`
	// FallbackProvider is "" (none), or the other provider ("smtp" or
	// "resend", configured in its own section): it takes a mail only when
	// the primary failed in a way that proves nothing was sent, or while
	// the primary's quota is used up or its breaker is open.
	FallbackProvider string `mapstructure:"fallback_provider" yaml:"fallback_provider"`
	// BreakerThreshold is how many configuration failures in a row, across
	// every replica, open a provider's circuit breaker.
	BreakerThreshold int `mapstructure:"breaker_threshold" yaml:"breaker_threshold"`
	// BreakerProbeInterval is the time between two probe sends while a
	// breaker is open.
	BreakerProbeInterval time.Duration `mapstructure:"breaker_probe_interval" yaml:"breaker_probe_interval"`
	// QuotaProbeInterval is the time between two probe sends while a
	// provider's sending quota is used up.
	QuotaProbeInterval time.Duration `mapstructure:"quota_probe_interval" yaml:"quota_probe_interval"`
	// SlowSendThreshold is the p90 of a provider's recent sends over which
	// the latency guard counts it slow; 0 turns the guard off.
	SlowSendThreshold time.Duration `mapstructure:"slow_send_threshold" yaml:"slow_send_threshold"`
	// SlowSendWindow is how many recent sends of a provider the p90 is
	// taken over.
	SlowSendWindow int `mapstructure:"slow_send_window" yaml:"slow_send_window"`
	// SlowSendConcurrency is the most sends at once to a slow provider; 0
	// means a quarter of sender.workers (at least 1) with a fallback
	// provider, and no limit without one.
	SlowSendConcurrency int `mapstructure:"slow_send_concurrency" yaml:"slow_send_concurrency"`
	// PriorityWeight is how many priority-lane mails the dispatcher takes
	// per bulk mail while both lanes have due mails; 0 is strict priority.
	PriorityWeight int `mapstructure:"priority_weight" yaml:"priority_weight"`
}

// LeaseMargin is the least time by which sender.lease must exceed
// sender.send_timeout, so that a worker that is still inside its deadline
// can record its outcome before another worker may reclaim the row. The
// daemon demands it (Settings.Check); Config.Validate does not (tests use
// short leases).
const LeaseMargin = 10 * time.Second

// The providers sender.provider and sender.fallback_provider may name.
const (
	ProviderSMTP   = "smtp"
	ProviderResend = "resend"
)

// DefaultSettings returns the default of every sender.* key: the one
// place they are written. Config.WithDefaults takes its defaults from it
// too.
func DefaultSettings() Settings {
	return Settings{
		Provider:             ProviderSMTP,
		Workers:              8,
		BatchSize:            50,
		Lease:                2 * time.Minute,
		SendTimeout:          30 * time.Second,
		MaxAttempts:          8,
		AmbiguousPolicy:      string(mailtype.PolicyRetry),
		AmbiguousRetries:     1,
		RetryBackoff:         5 * time.Second,
		RetryBackoffMax:      30 * time.Minute,
		PollInterval:         time.Second,
		ShutdownTimeout:      20 * time.Second,
		BreakerThreshold:     3,
		BreakerProbeInterval: 30 * time.Second,
		QuotaProbeInterval:   5 * time.Minute,
		SlowSendThreshold:    5 * time.Second,
		SlowSendWindow:       20,
		PriorityWeight:       4,
	}
}

// Report receives one violation of a configuration rule: the full key
// it is about and the message (a format and its arguments).
type Report func(key, format string, args ...any)

// Check reports every rule of the sender.* keys that s breaks, in a fixed
// order, each under its full key. The rules that also bind a pool built
// in code (Config.Validate) are written once, in checkShared. Whether the
// provider's own section (smtp.*, resend.*) is complete is the
// configuration's check, which spans sections.
func (s Settings) Check(bad Report) {
	switch s.Provider {
	case ProviderSMTP, ProviderResend:
	default:
		bad("sender.provider", "must be smtp or resend, got %q", s.Provider)
	}
	switch s.FallbackProvider {
	case "":
	case s.Provider:
		bad("sender.fallback_provider", "must differ from sender.provider (%s), or be empty", s.Provider)
	case ProviderSMTP, ProviderResend:
	default:
		bad("sender.fallback_provider", "must be smtp, resend or empty, got %q", s.FallbackProvider)
	}
	if s.AmbiguousRetries < 0 {
		bad("sender.ambiguous_retries", "must be >= 0, got %d", s.AmbiguousRetries)
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"sender.send_timeout", s.SendTimeout}, {"sender.lease", s.Lease},
		{"sender.retry_backoff", s.RetryBackoff}, {"sender.retry_backoff_max", s.RetryBackoffMax},
		{"sender.poll_interval", s.PollInterval}, {"sender.shutdown_timeout", s.ShutdownTimeout},
	} {
		if d.d <= 0 {
			bad(d.key, "must be a positive duration, got %s", d.d)
		}
	}
	c := s.Config()
	if s.SlowSendThreshold < 0 {
		// -1ns would pass as NoSlowSendGuard; the key takes 0 for off.
		bad("sender.slow_send_threshold", "must be >= 0 (0 means no latency guard), got %s", s.SlowSendThreshold)
		c.SlowSendThreshold = NoSlowSendGuard
	}
	c.checkShared(bad, LeaseMargin)
}

// Config maps the sender.* keys onto the pool's Config. The fields that
// other sections set (From, RateLimits, Secrets, ...) stay for the caller
// to fill. A key's 0 that means "off" becomes the Config's own word for
// it (NoSlowSendGuard, NoAmbiguousRetries), since a zero field means the
// default there.
func (s Settings) Config() Config {
	c := Config{
		Workers: s.Workers, BatchSize: s.BatchSize, Lease: s.Lease, SendTimeout: s.SendTimeout,
		MaxAttempts: s.MaxAttempts, AmbiguousPolicy: mailtype.AmbiguousPolicy(s.AmbiguousPolicy),
		AmbiguousRetries: s.AmbiguousRetries, RetryBackoff: s.RetryBackoff, RetryBackoffMax: s.RetryBackoffMax,
		RateLimit: s.RateLimit, PollInterval: s.PollInterval, ShutdownTimeout: s.ShutdownTimeout,
		BreakerThreshold: s.BreakerThreshold, BreakerProbe: s.BreakerProbeInterval, QuotaProbe: s.QuotaProbeInterval,
		SlowSendThreshold: s.SlowSendThreshold, SlowSendWindow: s.SlowSendWindow,
		SlowSendConcurrency: s.SlowSendConcurrency, PriorityWeight: s.PriorityWeight,
		OutcomeLinger: DefaultOutcomeLinger,
	}
	if s.SlowSendThreshold == 0 {
		c.SlowSendThreshold = NoSlowSendGuard
	}
	if s.AmbiguousRetries == 0 {
		c.AmbiguousRetries = NoAmbiguousRetries
	}
	return c
}

// checkShared reports the rules that bind both the sender.* keys and a
// Config built in code, in a fixed order; margin is the least time by
// which the lease must exceed the send timeout beyond "longer".
func (c Config) checkShared(bad Report, margin time.Duration) {
	for _, n := range []struct {
		key string
		n   int
	}{{"sender.workers", c.Workers}, {"sender.batch_size", c.BatchSize}, {"sender.max_attempts", c.MaxAttempts}} {
		if n.n <= 0 {
			bad(n.key, "must be positive, got %d", n.n)
		}
	}
	if !c.AmbiguousPolicy.Valid() {
		bad("sender.ambiguous_policy", "must be retry or unknown, got %q", c.AmbiguousPolicy)
	}
	if c.Lease <= c.SendTimeout || c.Lease < c.SendTimeout+margin {
		bad("sender.lease", "(%s) must exceed sender.send_timeout (%s)%s", c.Lease, c.SendTimeout, byAtLeast(margin))
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		bad("sender.retry_backoff_max", "(%s) must be at least sender.retry_backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	}
	if c.RateLimit < 0 {
		bad("sender.rate_limit", "must be >= 0 (0 means no limit)")
	}
	if c.BreakerThreshold < 1 {
		bad("sender.breaker_threshold", "must be at least 1, got %d", c.BreakerThreshold)
	}
	if c.BreakerProbe <= 0 {
		bad("sender.breaker_probe_interval", "must be a positive duration, got %s", c.BreakerProbe)
	}
	if c.QuotaProbe <= 0 {
		bad("sender.quota_probe_interval", "must be a positive duration, got %s", c.QuotaProbe)
	}
	c.checkLatencyGuard(bad)
}

// maxSlowSendWindow and maxPriorityWeight bound sender.slow_send_window
// and sender.priority_weight.
const (
	maxSlowSendWindow = 1000
	maxPriorityWeight = 100
)

// checkLatencyGuard reports the rules of the latency guard's keys
// (docs/design.md, "The latency guard") and of the priority weight.
func (c Config) checkLatencyGuard(bad Report) {
	if c.SlowSendThreshold < 0 && c.SlowSendThreshold != NoSlowSendGuard {
		bad("sender.slow_send_threshold", "must be >= 0 (0 means no latency guard), got %s", c.SlowSendThreshold)
	}
	if c.SlowSendWindow < 1 {
		bad("sender.slow_send_window", "must be positive, got %d", c.SlowSendWindow)
	} else if c.SlowSendWindow > maxSlowSendWindow {
		bad("sender.slow_send_window", "must be at most %d sends, got %d", maxSlowSendWindow, c.SlowSendWindow)
	}
	if c.SlowSendConcurrency < 0 {
		bad("sender.slow_send_concurrency", "must be >= 0 (0: a quarter of the workers with a fallback provider, no limit without one), got %d", c.SlowSendConcurrency)
	}
	if c.PriorityWeight < 0 || c.PriorityWeight > maxPriorityWeight {
		bad("sender.priority_weight", "must be between 0 (strict priority) and %d priority mails per bulk mail, got %d", maxPriorityWeight, c.PriorityWeight)
	}
}

// byAtLeast is the tail of the lease rule's message for margin.
func byAtLeast(margin time.Duration) string {
	if margin <= 0 {
		return ""
	}
	return fmt.Sprintf(" by at least %s", margin)
}
