package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/bounce"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/queuestats"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

// This file wires the configuration (internal/config) into the
// components' own Config structs. A component owns the keys of its section
// (their type, defaults and rules: sender.Settings, relay.Settings, the
// consumer's Config.Check), and maps them onto its Config itself
// (Settings.Config, config.Config.Consumer); what is left here are the
// fields that come from other sections. Components never import
// internal/config (.golangci.yml, depguard).

// ConsumerConfig is the consumer's part of cfg (config.Config.Consumer).
func ConsumerConfig(cfg *config.Config) consumer.Config { return cfg.Consumer() }

// senderConfig is the pool's part of cfg: sender.* (sender.Settings), the providers' rate
// limits (smtp.rate_limit, resend.rate_limit), mail.from,
// mail.max_event_age, log.mail_outcomes, and the secrets no error text
// may carry.
func senderConfig(c *config.Config) sender.Config {
	cfg := c.Sender.Config()
	cfg.From, cfg.MaxEventAge, cfg.OutcomeLevel = c.Mail.From, c.Mail.MaxEventAge, outcomeLevel(c.Log.MailOutcomes)
	cfg.Secrets, cfg.SuppressCodes = secretsOf(c), c.Suppression.SMTPCodes
	cfg.RateLimits = map[string]float64{"smtp": c.SMTP.RateLimit, "resend": c.Resend.RateLimit}
	return cfg
}

// outcomeLevel is the slog level of log.mail_outcomes (validated: info
// or debug).
func outcomeLevel(v string) slog.Level {
	if v == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// secretsOf lists the configured credentials that must never appear in an
// error text: the SMTP password, the Resend API key, the Resend webhook
// signing secret, the passwords of the database and of the management API,
// and the passphrase of the database's sslkey (sslpassword).
func secretsOf(c *config.Config) []string {
	out := []string{c.SMTP.Password.Reveal(), c.Resend.APIKey.Reveal(), c.Webhooks.ResendSecret.Reveal(), c.Bounces.Secret.Reveal()}
	for _, raw := range []string{c.Database.URL.Reveal(), c.AMQP.ManagementURL.Reveal()} {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.User != nil {
			if pw, ok := u.User.Password(); ok {
				out = append(out, pw)
			}
		}
		if pw := u.Query().Get("sslpassword"); pw != "" {
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
		RecipientLimit: RecipientLimit(c),
		Interval:       min(30*time.Second, max(time.Second, c.Sender.Lease/4))}
}

// BrokerConfig is the part of cfg every AMQP connection shares (the
// relay's, and those of the operator commands emit and dlq replay; the
// consumer's is ConsumerConfig): amqp.url, amqp.tls_* (read at Load) and
// the reconnect backoff, under connection name name.
func BrokerConfig(c *config.Config, name string) broker.Config {
	return broker.Config{
		URL: c.AMQP.URL.Reveal(), TLS: c.AMQPTLS(), Name: name,
		Backoff: c.AMQP.ReconnectBackoff, BackoffMax: c.AMQP.ReconnectBackoffMax,
	}
}

// relayConfig is the relay's part of cfg: relay.* keys (relay.Settings),
// amqp.events_exchange, amqp.events_queue and amqp.declare_topology, the
// broker reconnect backoff, and retention.window for published rows.
// Fields without a config key keep the relay's defaults.
func relayConfig(c *config.Config) relay.Config {
	rc := c.Relay.Config()
	rc.AMQP = BrokerConfig(c, "mailsvc-relay")
	rc.Exchange, rc.DeclareExchange, rc.EventsQueue = c.AMQP.EventsExchange, c.AMQP.DeclareTopology, c.AMQP.EventsQueue
	rc.RetentionWindow = c.Retention.Window
	return rc
}

// webhookConfig is the webhook server's part of cfg: webhooks.addr,
// webhooks.resend_secret and retention.window (how long webhook ids are
// remembered). Fields without a key keep the server's defaults.
func webhookConfig(c *config.Config) webhook.Config {
	wc := c.Webhooks.Config()
	wc.RetentionWindow = c.Retention.Window
	return wc
}

// queueStatsConfig is the queue reader's part of cfg: amqp.url, amqp.queue,
// amqp.dead_letter_queue, their length limits and amqp.management_url (in
// the vhost of amqp.url).
func queueStatsConfig(c *config.Config) queuestats.Config {
	qc := queuestats.Config{
		AMQP:  BrokerConfig(c, "mailsvc-queuestats"),
		Input: c.AMQP.Queue, DeadLetter: c.AMQP.DeadLetterQueue,
		InputMaxLength: c.AMQP.MaxQueueLength, DeadLetterMaxLength: c.AMQP.MaxDeadLetterQueueLength,
	}
	if m := c.AMQP.ManagementURL.Reveal(); m != "" {
		qc.Management = &broker.Management{BaseURL: m, Vhost: broker.Vhost(c.AMQP.URL.Reveal())}
	}
	return qc
}

// smtpConfig is the SMTP provider's part of cfg: smtp.* (smtp.tls_* as
// the TLS configuration read at Load), and sender.send_timeout as the
// bound of each SMTP command.
func smtpConfig(c *config.Config) smtp.Config {
	sc := smtp.Config{
		Host: c.SMTP.Host, Port: c.SMTP.Port, Username: c.SMTP.Username, Password: c.SMTP.Password,
		TLS: c.SMTP.TLS, TLSConfig: c.SMTPTLS(), IdempotencyHeader: c.SMTP.IdempotencyHeader, PhaseTimeout: c.Sender.SendTimeout,
	}
	if v := verpOf(c); v.On() {
		sc.ReturnPath, sc.DSNNotify = v.Address, c.Bounces.Notify
	}
	return sc
}

// verpOf is the VERP of bounces.address and bounces.secret; off when
// either is unset.
func verpOf(c *config.Config) bounce.Verp {
	local, domain, _ := strings.Cut(c.Bounces.Address, "@")
	if c.Bounces.Address == "" || c.Bounces.Secret == "" {
		return bounce.Verp{}
	}
	return bounce.Verp{LocalPart: local, Domain: domain, Secret: []byte(c.Bounces.Secret.Reveal())}
}

// bounceConfig is the bounce listener's part of cfg: bounces.*.
func bounceConfig(c *config.Config) (bounce.Config, error) {
	bc := bounce.Config{Addr: c.Bounces.Addr, Verp: verpOf(c), MaxMessageBytes: c.Bounces.MaxMessageBytes,
		AcceptDelivered: strings.Contains(c.Bounces.Notify, "SUCCESS")}
	if c.Bounces.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.Bounces.TLSCertFile, c.Bounces.TLSKeyFile)
		if err != nil {
			return bc, fmt.Errorf("bounces.tls_cert_file, bounces.tls_key_file: %w", err)
		}
		bc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return bc, nil
}

// resendConfig is the Resend provider's part of cfg: resend.*.
func resendConfig(c *config.Config) resend.Config {
	return resend.Config{APIKey: c.Resend.APIKey, BaseURL: c.Resend.BaseURL}
}

// TemplatesOptions is the template registry's part of cfg: templates.*.
func TemplatesOptions(c *config.Config) templates.Options {
	return templates.Options{Dir: c.Templates.Dir, DefaultLocale: c.Templates.DefaultLocale, TimeZone: c.Templates.TimeZone}
}

// RecipientLimit is mail.recipient_limit and its window, as the store
// applies them at ingest.
func RecipientLimit(c *config.Config) store.RecipientLimit {
	return store.RecipientLimit{Mails: c.Mail.RecipientLimit, Window: c.Mail.RecipientLimitWindow}
}

// DeliveryConfirm is the rule of the delivery-unconfirmed flag:
// mail.delivery_confirm_after over the providers that report deliveries
// (config.DeliveryReporters). The daemon and the operator commands use
// the same, so the gauge, `mail list --unconfirmed` and `mail show` agree.
func DeliveryConfirm(c *config.Config) store.DeliveryConfirm {
	return store.DeliveryConfirm{Providers: c.DeliveryReporters(), After: c.Mail.DeliveryConfirmAfter}
}

// pollerConfig is the bounce mailbox poller's part of cfg.
func pollerConfig(c *config.Config) bounce.PollerConfig {
	return bounce.PollerConfig{URL: c.Bounces.IMAPURL.Reveal(), Verp: verpOf(c), Interval: c.Bounces.IMAPInterval,
		MaxMessageBytes: c.Bounces.MaxMessageBytes, AcceptDelivered: strings.Contains(c.Bounces.Notify, "SUCCESS")}
}
