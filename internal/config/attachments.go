package config

import (
	"strings"
	"time"
)

// Bounds of mail.max_attachment_bytes. DefaultMaxAttachmentBytes (10 MiB)
// is about 13.4 MiB once base64 encoded; the limit (28 MiB, 37.3 MiB
// encoded) keeps a mail with its bodies within Resend's 40 MB per mail
// after base64 (Resend API reference, "Send Email", attachments).
const (
	DefaultMaxAttachmentBytes = 10 << 20
	MinAttachmentBytes        = 1 << 10
	MaxAttachmentBytesLimit   = 28 << 20
)

// Attachments configures the fetch stage (internal/attach): which hosts
// an attachment URL may name, and how hard and how long mailsvc tries.
type Attachments struct {
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
	// Concurrency is the most fetches at once per process, 1 to 64.
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

// Enabled reports whether attachments are fetched at all.
func (a Attachments) Enabled() bool { return len(a.AllowedHosts) > 0 }

func (c *Config) validateAttachments(bad func(string, string, ...any)) {
	if n := c.Mail.MaxAttachmentBytes; n < MinAttachmentBytes || n > MaxAttachmentBytesLimit {
		bad("mail.max_attachment_bytes", "must be %d to %d bytes (Resend takes at most 40 MB per mail after base64), got %d",
			MinAttachmentBytes, MaxAttachmentBytesLimit, n)
	}
	a := c.Attachments
	for _, h := range a.AllowedHosts {
		if !validHostPattern(h) {
			bad("attachments.allowed_hosts", "%q is not a lower-case host name or *.suffix pattern", h)
		}
	}
	if a.Concurrency < 1 || a.Concurrency > 64 {
		bad("attachments.concurrency", "must be 1 to 64, got %d", a.Concurrency)
	}
	if a.MinRate < 0 {
		bad("attachments.min_rate", "must be 0 (off) or more bytes per second, got %d", a.MinRate)
	}
	for _, d := range []keyDuration{
		{"attachments.timeout", a.Timeout}, {"attachments.progress_window", a.ProgressWindow},
		{"attachments.retry_backoff", a.RetryBackoff}, {"attachments.retry_backoff_max", a.RetryBackoffMax},
		{"attachments.poll_interval", a.PollInterval},
	} {
		if d.d <= 0 {
			bad(d.key, "must be a positive duration, got %s", d.d)
		}
	}
	if a.RetryBackoffMax < a.RetryBackoff {
		bad("attachments.retry_backoff_max", "(%s) must be at least attachments.retry_backoff (%s)", a.RetryBackoffMax, a.RetryBackoff)
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
