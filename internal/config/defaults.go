package config

import (
	"time"

	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/bounce"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
)

// LeaseMargin is the least time by which sender.lease must exceed
// sender.send_timeout (sender.LeaseMargin).
const LeaseMargin = sender.LeaseMargin

// MaxReconnectBackoff is the largest amqp.reconnect_backoff_max Validate
// accepts. Every part holding a broker connection (consumer, relay,
// operator commands) consumes or publishes again within 5 s of the
// broker's return, however long it was away (issue 30): the reconnect
// attempt that meets the return comes at most reconnect_backoff_max after
// it, and the dial, topology and first delivery take the rest. The default
// is 2 s.
const MaxReconnectBackoff = 4 * time.Second

// ResendDefaultRateLimit is resend.rate_limit's default, in requests per
// second: Resend's documented default rate limit of a team, shared by all
// its API keys (Resend API reference, "Usage Limits":
// https://resend.com/docs/api-reference/rate-limit; it was 2 before).
const ResendDefaultRateLimit = 5.0

// DefaultDeliveryConfirmAfter is mail.delivery_confirm_after's default.
// Resend reports a delivery as soon as the recipient's server took the
// mail, and retries a webhook its endpoint did not take immediately, after
// 5 s, 5 min and 30 min, the next one 2 h later (Resend, "Retries and
// Replays": https://resend.com/docs/webhooks/retries-and-replays): an hour
// covers the first four tries of every report with room for a deferral of
// a few minutes (greylisting), so a flagged mail is one whose report is
// really missing, or whose delivery is deferred for longer.
const DefaultDeliveryConfirmAfter = time.Hour

// defaultConfig is the configuration before any file or variable: the
// default of every key, each written once. The sections a component owns
// take the component's defaults (sender.DefaultSettings,
// relay.DefaultSettings, attach.DefaultSettings, the consumer's Default* constants); the others
// are written here.
func defaultConfig() Config {
	return Config{
		Database: Database{URL: "postgres://postgres@127.0.0.1:5432/mailsvc?sslmode=disable"},
		AMQP: AMQP{
			URL:                      "amqp://guest:guest@127.0.0.1:5672/",
			InputExchange:            "order.events",
			Queue:                    "mail.order-events",
			BindingKeys:              []string{"order.confirmed", "order.cancelled"},
			DeadLetterExchange:       "mail.dlx",
			DeadLetterQueue:          "mail.order-events.dlq",
			EventsExchange:           "mail.events",
			DeclareTopology:          true,
			Prefetch:                 consumer.DefaultPrefetch,
			BatchSize:                consumer.DefaultBatchSize,
			DeliveryLimit:            consumer.DefaultDeliveryLimit,
			MaxMessageBytes:          consumer.DefaultMaxMessageBytes,
			RedeliveryWindow:         336 * time.Hour,
			ReconnectBackoff:         broker.DefaultBackoff,
			ReconnectBackoffMax:      broker.DefaultBackoffMax,
			MaxQueueLength:           consumer.DefaultMaxQueueLength,
			MaxDeadLetterQueueLength: consumer.DefaultMaxDeadLetterQueueLength,
			QueueLimits:              "arguments",
		},
		Sender: sender.DefaultSettings(),
		SMTP:   SMTP{Host: "localhost", Port: 587, TLS: smtp.TLSStartTLS},
		// Resend's documented default account limit (ResendDefaultRateLimit).
		Resend: Resend{BaseURL: resend.DefaultBaseURL, RateLimit: ResendDefaultRateLimit},
		Mail: Mail{
			MaxEventAge: consumer.DefaultMaxEventAge, CancelNotice: true,
			RecipientLimit: 50, RecipientLimitWindow: time.Hour,
			// Resend's webhook retries (DefaultDeliveryConfirmAfter).
			DeliveryConfirmAfter: DefaultDeliveryConfirmAfter,
			MaxAttachmentBytes:   DefaultMaxAttachmentBytes,
		},
		Attachments: attach.DefaultSettings(),
		Relay:       relay.DefaultSettings(),
		Retention:   Retention{Window: 336 * time.Hour},
		HTTP:        HTTP{Addr: ":8080"},
		Suppression: Suppression{
			Scope:            "deployment",
			SMTPCodes:        []string{"5.1.1", "5.1.2", "5.1.3", "5.1.6", "5.1.10", "5.2.1"},
			TransientBounces: 3, TransientWindow: 7 * 24 * time.Hour, TransientExpiry: 14 * 24 * time.Hour,
		},
		Bounces: Bounces{MaxMessageBytes: bounce.DefaultMaxMessageBytes, Notify: "SUCCESS,FAILURE,DELAY",
			IMAPInterval: bounce.DefaultIMAPInterval},
		Templates: Templates{DefaultLocale: "vi", TimeZone: "Asia/Ho_Chi_Minh"},
		Log:       Log{Level: "info", MailOutcomes: "info"},
		Serve:     Serve{Roles: []string{RoleConsumer, RoleSender, RoleRelay}},
		Console:   Console{SessionTTL: console.DefaultSessionTTL, TrustedProxyDefaultRole: ConsoleViewer},
	}
}

// defaults maps every config key to its default (defaultConfig, flattened
// by the mapstructure names); a key absent here is unknown and rejected in
// a file.
var defaults = flatten(defaultConfig())
