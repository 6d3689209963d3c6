package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Validate checks every rule and returns all violations at once
// (errors.Join), each message starting with the key it is about.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	c.validateConnections(bad)
	c.validateTLS(bad)
	c.validateSender(bad)
	c.Relay.Check(bad)
	c.validateDurations(bad)
	c.validateWebhooks(bad)
	c.validateBounces(bad)
	c.validateConsole(bad)
	c.validateAttachments(bad)
	if c.Mail.From == "" {
		bad("mail.from", "is required (e.g. \"Shop <orders@example.com>\")")
	} else if _, err := mail.ParseAddress(c.Mail.From); err != nil {
		bad("mail.from", "%q is not an address: %v", c.Mail.From, err)
	}
	if c.Mail.ReplyTo != "" {
		if _, err := mail.ParseAddress(c.Mail.ReplyTo); err != nil {
			bad("mail.reply_to", "%q is not an address: %v", c.Mail.ReplyTo, err)
		}
	}
	if ns := c.Mail.IdempotencyNamespace; len(ns) > 64 || strings.ContainsFunc(ns, notVisibleASCII) {
		bad("mail.idempotency_namespace", "must be at most 64 visible ASCII characters (no space or control character), got %q", ns)
	}
	if h := c.SMTP.IdempotencyHeader; h != "" && !validHeaderName(h) {
		bad("smtp.idempotency_header", "must be a header field name (RFC 5322: visible ASCII, no colon) that mailsvc does not set itself, got %q", h)
	}
	if c.Templates.Dir != "" {
		if st, err := os.Stat(c.Templates.Dir); err != nil || !st.IsDir() {
			bad("templates.dir", "%q is not a readable directory", c.Templates.Dir)
		}
	}
	if _, err := time.LoadLocation(c.Templates.TimeZone); err != nil {
		bad("templates.time_zone", "unknown time zone %q", c.Templates.TimeZone)
	}
	if c.Templates.DefaultLocale != "vi" && c.Templates.DefaultLocale != "en" {
		bad("templates.default_locale", "must be vi or en, got %q", c.Templates.DefaultLocale)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Log.Level)); err != nil {
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Suppression.Scope != "deployment" && c.Suppression.Scope != "account" {
		bad("suppression.scope", "must be deployment or account, got %q", c.Suppression.Scope)
	}
	if n := c.Suppression.TransientBounces; n < 0 || n > 1000 {
		bad("suppression.transient_bounces", "must be 0 (off) or 1 to 1000, got %d", n)
	}
	for _, d := range []keyDuration{{"suppression.transient_window", c.Suppression.TransientWindow},
		{"suppression.transient_expiry", c.Suppression.TransientExpiry}} {
		if d.d > maxTransientDuration {
			bad(d.key, "must be at most %s, got %s", maxTransientDuration, d.d)
		}
	}
	for _, code := range c.Suppression.SMTPCodes {
		if !permanentCode.MatchString(code) {
			bad("suppression.smtp_codes", "%q is not a permanent enhanced status code (RFC 3463: 5.x.y, e.g. 5.1.1)", code)
		}
	}
	if c.Log.MailOutcomes != "info" && c.Log.MailOutcomes != "debug" {
		bad("log.mail_outcomes", "must be info or debug, got %q", c.Log.MailOutcomes)
	}
	c.validateRoles(bad)
	return errors.Join(errs...)
}

// permanentCode is an RFC 3463 enhanced status code of class 5.
var permanentCode = regexp.MustCompile(`^5\.[0-9]{1,3}\.[0-9]{1,3}$`)

// The bounds of the per-recipient limit: the database counts in 32-bit
// integers, and a window over 30 days outlives any producer's mistake.
const (
	maxRecipientLimit       = 1_000_000
	maxRecipientLimitWindow = 30 * 24 * time.Hour
	// maxTransientDuration bounds the transient-bounce window and expiry:
	// a year, far below the database's 32-bit seconds.
	maxTransientDuration = 365 * 24 * time.Hour
)

func (c *Config) validateConnections(bad func(string, string, ...any)) {
	c.validateDatabase(bad)
	if u, err := url.Parse(c.AMQP.URL.Reveal()); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") ||
		!strings.HasPrefix(strings.ToLower(c.AMQP.URL.Reveal()), u.Scheme+"://") {
		// amqp:/u:pw@h and amqp:u:pw@h parse, as a path or an opaque part,
		// and the client would dial localhost as guest.
		bad("amqp.url", "must be an amqp:// or amqps:// URL")
	}
	// The input topology, its limits and the batch: the consumer's rules.
	c.Consumer().Check(bad)
	if c.AMQP.EventsExchange == "" {
		bad("amqp.events_exchange", "must not be empty")
	}
	if c.AMQP.QueueLimits != "arguments" && c.AMQP.QueueLimits != "policy" {
		bad("amqp.queue_limits", "must be arguments or policy, got %q", c.AMQP.QueueLimits)
	}
	if m := c.AMQP.ManagementURL.Reveal(); m != "" {
		if u, err := url.Parse(m); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("amqp.management_url", "must be an http(s) URL such as http://user:password@rabbitmq:15672/, or empty")
		}
	}
	if _, port, err := net.SplitHostPort(c.HTTP.Addr); err != nil || port == "" {
		bad("http.addr", "must be host:port or :port, got %q", c.HTTP.Addr)
	}
}

// validateSender checks the sender.* keys (the pool's own rules,
// sender.Settings.Check), the sections of the providers they choose, and
// the providers' own keys.
func (c *Config) validateSender(bad func(string, string, ...any)) {
	s := c.Sender
	c.Sender.Check(bad)
	if s.Provider == "smtp" || s.Provider == "resend" {
		c.validateProvider(bad, s.Provider, "sender.provider")
	}
	if s.FallbackProvider != s.Provider && (s.FallbackProvider == "smtp" || s.FallbackProvider == "resend") {
		c.validateProvider(bad, s.FallbackProvider, "sender.fallback_provider")
	}
	if c.SMTP.RateLimit < 0 {
		bad("smtp.rate_limit", "must be >= 0 (0 means no limit)")
	}
	if c.Resend.RateLimit < 0 {
		bad("resend.rate_limit", "must be >= 0 (0 means no limit)")
	}
	switch c.SMTP.TLS {
	case "starttls", "implicit", "opportunistic", "none":
	default:
		bad("smtp.tls", "must be starttls, implicit, opportunistic or none, got %q", c.SMTP.TLS)
	}
}

// validateProvider checks the section of a provider in use (by key: the
// sender.provider or sender.fallback_provider that chose it).
func (c *Config) validateProvider(bad func(string, string, ...any), name, by string) {
	switch name {
	case "smtp":
		if c.SMTP.Host == "" {
			bad("smtp.host", "is required with %s smtp", by)
		}
		if c.SMTP.Port < 1 || c.SMTP.Port > 65535 {
			bad("smtp.port", "must be 1..65535, got %d", c.SMTP.Port)
		}
	case "resend":
		if c.Resend.APIKey == "" {
			bad("resend.api_key", "is required with %s resend (or set resend.api_key_file)", by)
		}
		if u, err := url.Parse(c.Resend.BaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
			bad("resend.base_url", "must be an http(s) URL")
		}
	}
}

// keyDuration is a duration key and its value, for checks that run over
// several keys in a fixed order.
type keyDuration struct {
	key string
	d   time.Duration
}

// validateDurations checks the duration keys of the sections config owns,
// and the rules between durations of different sections.
func (c *Config) validateDurations(bad func(string, string, ...any)) {
	for _, d := range []keyDuration{
		{"mail.max_event_age", c.Mail.MaxEventAge}, {"retention.window", c.Retention.Window},
		{"mail.recipient_limit_window", c.Mail.RecipientLimitWindow},
		{"suppression.transient_window", c.Suppression.TransientWindow},
		{"suppression.transient_expiry", c.Suppression.TransientExpiry},
		{"amqp.reconnect_backoff", c.AMQP.ReconnectBackoff}, {"amqp.reconnect_backoff_max", c.AMQP.ReconnectBackoffMax},
	} {
		if d.d <= 0 {
			bad(d.key, "must be a positive duration, got %s", d.d)
		}
	}
	if c.AMQP.ReconnectBackoffMax < c.AMQP.ReconnectBackoff {
		bad("amqp.reconnect_backoff_max", "must be at least amqp.reconnect_backoff")
	}
	if c.AMQP.ReconnectBackoffMax > MaxReconnectBackoff {
		bad("amqp.reconnect_backoff_max", "(%s) must be at most %s: the reconnect that meets the broker's return may come that long after it, and mailsvc consumes and publishes again within 5 s of it", c.AMQP.ReconnectBackoffMax, MaxReconnectBackoff)
	}
	if c.Retention.Window < c.AMQP.RedeliveryWindow {
		bad("retention.window", "(%s) must be at least amqp.redelivery_window (%s): a row deleted earlier lets a redelivered event send again", c.Retention.Window, c.AMQP.RedeliveryWindow)
	}
	if n := c.Mail.RecipientLimit; n < 0 || n > maxRecipientLimit {
		bad("mail.recipient_limit", "must be 0 (off) or 1 to %d, got %d", maxRecipientLimit, n)
	}
	if w := c.Mail.RecipientLimitWindow; w > 0 && (w < time.Second || w%time.Second != 0 || w > maxRecipientLimitWindow) {
		bad("mail.recipient_limit_window", "must be whole seconds, from 1s to %s, got %s", maxRecipientLimitWindow, w)
	}
	if d := c.Mail.DeliveryConfirmAfter; d != 0 && (d < time.Minute || d > c.Retention.Window) {
		bad("mail.delivery_confirm_after", "must be 0 (off) or 1m to retention.window (%s): a mail is deleted after that, got %s", c.Retention.Window, d)
	}
	if c.Retention.Window < c.Mail.MaxEventAge {
		bad("retention.window", "(%s) must be at least mail.max_event_age (%s)", c.Retention.Window, c.Mail.MaxEventAge)
	}
}

// validateWebhooks checks webhooks.* (webhook.Settings.Check) and that
// the listener is not http.addr's.
func (c *Config) validateWebhooks(bad func(string, string, ...any)) {
	w := c.Webhooks
	w.Check(bad)
	if _, port, err := net.SplitHostPort(w.Addr); w.Addr != "" && err == nil && port != "" && sameListener(w.Addr, c.HTTP.Addr) {
		bad("webhooks.addr", "(%q) must differ from http.addr (%q): webhooks get a listener of their own", w.Addr, c.HTTP.Addr)
	}
}

// validateBounces checks bounces.*: an address with its secret, a
// listener address like webhooks.addr's, a NOTIFY of RFC 3461's words.
func (c *Config) validateBounces(bad func(string, string, ...any)) {
	b := c.Bounces
	if b.Address != "" {
		if local, domain, ok := strings.Cut(b.Address, "@"); !ok || local == "" || domain == "" ||
			strings.ContainsAny(b.Address, "+ <>\t\r\n") {
			bad("bounces.address", "must be local@domain without '+' (mailsvc adds +TOKEN), got %q", b.Address)
		}
		if len(b.Secret.Reveal()) < 16 {
			bad("bounces.secret", "is required with bounces.address and must be at least 16 bytes (or set bounces.secret_file)")
		}
	}
	if b.Addr != "" {
		if _, port, err := net.SplitHostPort(b.Addr); err != nil || port == "" {
			bad("bounces.addr", "must be host:port or :port, got %q", b.Addr)
		} else if b.Address == "" {
			bad("bounces.addr", "needs bounces.address: the listener takes mail for its domain only")
		}
	}
	if raw := b.IMAPURL.Reveal(); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "imap" && u.Scheme != "imaps") || u.Host == "" || u.User == nil {
			bad("bounces.imap_url", "must be imaps://USER:PASSWORD@HOST[:PORT]/MAILBOX (or imap://)")
		} else if b.Address == "" {
			bad("bounces.imap_url", "needs bounces.address: reports are matched by their VERP address")
		}
		if b.IMAPInterval < time.Second {
			bad("bounces.imap_interval", "must be at least 1s, got %s", b.IMAPInterval)
		}
	}
	if (b.TLSCertFile == "") != (b.TLSKeyFile == "") {
		bad("bounces.tls_cert_file", "and bounces.tls_key_file go together")
	}
	if b.MaxMessageBytes < 1024 || b.MaxMessageBytes > 64<<20 {
		bad("bounces.max_message_bytes", "must be 1024 to 67108864, got %d", b.MaxMessageBytes)
	}
	for _, w := range strings.Split(b.Notify, ",") {
		if b.Notify != "" && !slices.Contains([]string{"FAILURE", "DELAY", "SUCCESS", "NEVER"}, strings.TrimSpace(w)) {
			bad("bounces.notify", "must be FAILURE, DELAY and SUCCESS, comma separated, or NEVER, got %q", b.Notify)
			break
		}
	}
}

// sameListener reports whether two listen addresses take the same port on
// an overlapping host (an empty host is every address); port 0, a port
// the system picks, never clashes.
func sameListener(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, err := net.SplitHostPort(b)
	return err == nil && pa == pb && pa != "0" && (ha == hb || ha == "" || hb == "")
}

// notVisibleASCII reports whether r is outside printable ASCII without
// space (RFC 5322 VCHAR, 33-126): such a character cannot travel in an
// HTTP or mail header unencoded.
func notVisibleASCII(r rune) bool { return r < 33 || r > 126 }

// ownHeaders are the mail headers mailsvc writes itself; an idempotency
// header of the same name would duplicate one of them.
var ownHeaders = []string{"from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id",
	"mime-version", "content-type", "content-transfer-encoding", "x-dedupe-key"}

// validHeaderName reports whether h is an RFC 5322 field name (ftext:
// visible ASCII but colon) other than one of ownHeaders.
func validHeaderName(h string) bool {
	if strings.ContainsFunc(h, func(r rune) bool { return notVisibleASCII(r) || r == ':' }) {
		return false
	}
	for _, own := range ownHeaders {
		if strings.EqualFold(h, own) {
			return false
		}
	}
	return true
}

func (c *Config) validateRoles(bad func(string, string, ...any)) {
	if len(c.Serve.Roles) == 0 {
		bad("serve.roles", "must name at least one of %s", strings.Join(Roles, ", "))
	}
	for _, r := range c.Serve.Roles {
		if !slices.Contains(Roles, r) {
			bad("serve.roles", "unknown role %q (known: %s)", r, strings.Join(Roles, ", "))
		}
	}
}

// validateDatabase checks database.url: set, and a postgres:// URL or a
// key=value connection string.
func (c *Config) validateDatabase(bad func(string, string, ...any)) {
	if db := c.Database.URL.Reveal(); db == "" {
		bad("database.url", "is required")
	} else if strings.Contains(db, "://") {
		if u, err := url.Parse(db); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("database.url", "must be a postgres:// URL or a key=value connection string")
		}
	}
}
