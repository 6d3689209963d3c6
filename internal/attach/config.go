package attach

import (
	"crypto/tls"
	"strings"
	"time"
)

// Settings is the `attachments` section of configs/mailsvc.yaml, as the
// configuration file spells it: the mapstructure and yaml names are the
// keys (attachments.allowed_hosts, ...). internal/config decodes the
// section into it; DefaultSettings holds its defaults, Check its rules and
// Config maps it onto the stage's Config.
type Settings struct {
	// AllowedHosts are the host names (exact, lower case) or "*.suffix"
	// patterns an attachment URL may name, redirects included. Empty:
	// attachments are off and an event carrying any is refused.
	AllowedHosts []string `mapstructure:"allowed_hosts" yaml:"allowed_hosts"`
	// AllowPrivate lets the fetch connect to loopback, private,
	// link-local and unspecified addresses (tests, a private object
	// store); false refuses them at dial time.
	AllowPrivate bool `mapstructure:"allow_private" yaml:"allow_private"`
	// TLSCAFile is a PEM bundle of the CAs that may sign the file
	// servers' certificates; "" means the system roots.
	TLSCAFile string `mapstructure:"tls_ca_file" yaml:"tls_ca_file"`
	// Concurrency is the most fetches at once per process, 1 to
	// MaxConcurrency.
	Concurrency int `mapstructure:"concurrency" yaml:"concurrency"`
	// Timeout bounds one fetch, connection to last byte.
	Timeout time.Duration `mapstructure:"timeout" yaml:"timeout"`
	// MinRate, in bytes per second, and ProgressWindow are the trickle
	// guard: a fetch that reads fewer than MinRate*ProgressWindow bytes in
	// a window is abandoned (and retried).
	MinRate        int           `mapstructure:"min_rate" yaml:"min_rate"`
	ProgressWindow time.Duration `mapstructure:"progress_window" yaml:"progress_window"`
	// RetryBackoff and RetryBackoffMax bound the wait between two fetches
	// of a mail's attachments (capped exponential with jitter); retries
	// stop when the mail's max event age runs out.
	RetryBackoff    time.Duration `mapstructure:"retry_backoff" yaml:"retry_backoff"`
	RetryBackoffMax time.Duration `mapstructure:"retry_backoff_max" yaml:"retry_backoff_max"`
	// PollInterval is how often the stage looks for mails to fetch.
	PollInterval time.Duration `mapstructure:"poll_interval" yaml:"poll_interval"`
}

// MaxConcurrency is the largest attachments.concurrency.
const MaxConcurrency = 64

// DefaultSettings returns the default of every attachments.* key: the one
// place they are written. Attachments are off by default (no host).
func DefaultSettings() Settings {
	return Settings{
		Concurrency: 4, Timeout: time.Minute, MinRate: 4096, ProgressWindow: 10 * time.Second,
		RetryBackoff: 10 * time.Second, RetryBackoffMax: 10 * time.Minute, PollInterval: time.Second,
	}
}

// Enabled reports whether attachments are fetched at all.
func (s Settings) Enabled() bool { return len(s.AllowedHosts) > 0 }

// Report receives one violation of a configuration rule: the full key
// it is about and the message (a format and its arguments).
type Report func(key, format string, args ...any)

// Check reports every rule of the attachments.* keys that s breaks, in a
// fixed order, each under its full key. Whether the CA file reads is
// checked when the stage is built.
func (s Settings) Check(bad Report) {
	for _, h := range s.AllowedHosts {
		if !validHostPattern(h) {
			bad("attachments.allowed_hosts", "%q is not a lower-case host name or *.suffix pattern", h)
		}
	}
	if s.Concurrency < 1 || s.Concurrency > MaxConcurrency {
		bad("attachments.concurrency", "must be 1 to %d, got %d", MaxConcurrency, s.Concurrency)
	}
	if s.MinRate < 0 {
		bad("attachments.min_rate", "must be 0 (off) or more bytes per second, got %d", s.MinRate)
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"attachments.timeout", s.Timeout}, {"attachments.progress_window", s.ProgressWindow},
		{"attachments.retry_backoff", s.RetryBackoff}, {"attachments.retry_backoff_max", s.RetryBackoffMax},
		{"attachments.poll_interval", s.PollInterval},
	} {
		if d.d <= 0 {
			bad(d.key, "must be a positive duration, got %s", d.d)
		}
	}
	if s.RetryBackoffMax < s.RetryBackoff {
		bad("attachments.retry_backoff_max", "(%s) must be at least attachments.retry_backoff (%s)", s.RetryBackoffMax, s.RetryBackoff)
	}
}

// Config maps the attachments.* keys onto the stage's Config, with the
// client TLS configuration built from TLSCAFile (nil: the system roots)
// and mail.max_event_age.
func (s Settings) Config(tlsCfg *tls.Config, maxEventAge time.Duration) Config {
	return Config{
		Fetch: FetchConfig{
			Policy: Policy{AllowedHosts: s.AllowedHosts, AllowPrivate: s.AllowPrivate},
			TLS:    tlsCfg, Timeout: s.Timeout, MinRate: s.MinRate, ProgressWindow: s.ProgressWindow,
		},
		Concurrency: s.Concurrency, RetryBackoff: s.RetryBackoff, RetryBackoffMax: s.RetryBackoffMax,
		PollInterval: s.PollInterval, MaxEventAge: maxEventAge,
	}
}

// validHostPattern accepts a lower-case DNS name, or "*." and one, with
// no port, scheme or path.
func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") {
		return false
	}
	for _, r := range h {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.' {
			return false
		}
	}
	return true
}
