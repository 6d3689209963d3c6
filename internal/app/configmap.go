package app

import (
	"net/url"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// This file is the one place where the keys of configs/mailsvc.yaml
// (internal/config) become the components' own Config structs. Components
// never import internal/config (.golangci.yml, depguard); each owns its
// Config and fills the fields that have no key with its WithDefaults.
// TestDocumentedDefaultsAreEffective holds the documented defaults of the
// file equal to what the components run with.

// ConsumerConfig is the consumer's part of cfg: the amqp.* keys of the
// input topology and mail.*. IdempotencyNamespace is the key's raw value;
// serve replaces it with the resolved one (store.IdempotencyNamespace).
func ConsumerConfig(cfg *config.Config) consumer.Config {
	a := cfg.AMQP
	return consumer.Config{
		URL: a.URL.Reveal(), ConnectionName: "mailsvc-consumer",
		InputExchange: a.InputExchange, Queue: a.Queue, BindingKeys: a.BindingKeys,
		DeadLetterExchange: a.DeadLetterExchange, DeadLetterQueue: a.DeadLetterQueue,
		DeclareTopology: a.DeclareTopology, Prefetch: a.Prefetch, BatchSize: a.BatchSize,
		DeliveryLimit: a.DeliveryLimit, MaxMessageBytes: a.MaxMessageBytes,
		MaxEventAge: cfg.Mail.MaxEventAge, MailFrom: cfg.Mail.From, MailReplyTo: cfg.Mail.ReplyTo,
		IdempotencyNamespace: cfg.Mail.IdempotencyNamespace,
		ReconnectBackoff:     a.ReconnectBackoff, ReconnectBackoffMax: a.ReconnectBackoffMax,
	}
}

// senderConfig is the pool's part of cfg: sender.*, the providers' rate
// limits (smtp.rate_limit, resend.rate_limit), mail.from and
// mail.max_event_age, and the secrets no error text may carry.
func senderConfig(c *config.Config) sender.Config {
	s := c.Sender
	cfg := sender.Config{
		Workers: s.Workers, BatchSize: s.BatchSize, Lease: s.Lease, SendTimeout: s.SendTimeout,
		MaxAttempts: s.MaxAttempts, AmbiguousPolicy: mailtype.AmbiguousPolicy(s.AmbiguousPolicy),
		RetryBackoff: s.RetryBackoff, RetryBackoffMax: s.RetryBackoffMax, RateLimit: s.RateLimit,
		PollInterval: s.PollInterval, ShutdownTimeout: s.ShutdownTimeout, From: c.Mail.From,
		AmbiguousRetries: s.AmbiguousRetries, Secrets: secretsOf(c), MaxEventAge: c.Mail.MaxEventAge,
		RateLimits:       map[string]float64{"smtp": c.SMTP.RateLimit, "resend": c.Resend.RateLimit},
		BreakerThreshold: s.BreakerThreshold, BreakerProbe: s.BreakerProbeInterval, QuotaProbe: s.QuotaProbeInterval,
	}
	if s.AmbiguousRetries == 0 {
		cfg.AmbiguousRetries = sender.NoAmbiguousRetries
	}
	return cfg
}

// secretsOf lists the configured credentials that must never appear in an
// error text: the SMTP password, the Resend API key and the database
// password.
func secretsOf(c *config.Config) []string {
	out := []string{c.SMTP.Password.Reveal(), c.Resend.APIKey.Reveal()}
	if u, err := url.Parse(c.Database.URL.Reveal()); err == nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
	}
	return out
}

// janitorConfig is the janitor's part of cfg: the pool's rules,
// retention.window, and a round every quarter lease (at most 30s, at least
// 1s), so that an expired send waits little longer than its lease and
// grace for its verdict.
func janitorConfig(c *config.Config) sender.JanitorConfig {
	return sender.JanitorConfig{Sender: senderConfig(c), RetentionWindow: c.Retention.Window,
		Interval: min(30*time.Second, max(time.Second, c.Sender.Lease/4))}
}

// relayConfig is the relay's part of cfg: relay.* keys,
// amqp.events_exchange, amqp.events_queue and amqp.declare_topology, the
// broker reconnect backoff, and retention.window for published rows.
// Fields without a config key keep the relay's defaults.
func relayConfig(c *config.Config) relay.Config {
	return relay.Config{
		AMQP: broker.Config{
			URL: c.AMQP.URL.Reveal(), Name: "mailsvc-relay",
			Backoff: c.AMQP.ReconnectBackoff, BackoffMax: c.AMQP.ReconnectBackoffMax,
		},
		Exchange:        c.AMQP.EventsExchange,
		DeclareExchange: c.AMQP.DeclareTopology,
		EventsQueue:     c.AMQP.EventsQueue,
		BatchSize:       c.Relay.BatchSize,
		PollInterval:    c.Relay.PollInterval,
		ConfirmTimeout:  c.Relay.ConfirmTimeout,
		MaxAttempts:     c.Relay.MaxAttempts,
		DisableListen:   !c.Relay.Listen,
		Lease:           c.Relay.Lease,
		LeaseRenew:      c.Relay.LeaseRenew,
		LeaseRetry:      c.Relay.LeaseRetry,
		RetentionWindow: c.Retention.Window,
	}
}

// smtpConfig is the SMTP provider's part of cfg: smtp.*, and
// sender.send_timeout as the bound of each SMTP command.
func smtpConfig(c *config.Config) smtp.Config {
	return smtp.Config{
		Host: c.SMTP.Host, Port: c.SMTP.Port, Username: c.SMTP.Username, Password: c.SMTP.Password,
		TLS: c.SMTP.TLS, IdempotencyHeader: c.SMTP.IdempotencyHeader, PhaseTimeout: c.Sender.SendTimeout,
	}
}

// resendConfig is the Resend provider's part of cfg: resend.*.
func resendConfig(c *config.Config) resend.Config {
	return resend.Config{APIKey: c.Resend.APIKey, BaseURL: c.Resend.BaseURL}
}

// TemplatesOptions is the template registry's part of cfg: templates.*.
func TemplatesOptions(c *config.Config) templates.Options {
	return templates.Options{Dir: c.Templates.Dir, DefaultLocale: c.Templates.DefaultLocale, TimeZone: c.Templates.TimeZone}
}
