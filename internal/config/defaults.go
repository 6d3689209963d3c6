package config

import "time"

// LeaseMargin is the least time by which sender.lease must exceed
// sender.send_timeout, so that a worker that is still inside its deadline
// can record its outcome before another worker may reclaim the row.
const LeaseMargin = 10 * time.Second

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

// defaults maps every config key to its default; a key absent here is
// unknown and rejected in a file.
var defaults = map[string]any{
	"database.url":       "postgres://postgres@127.0.0.1:5432/mailsvc?sslmode=disable",
	"database.max_conns": 0,

	"amqp.url":                          "amqp://guest:guest@127.0.0.1:5672/",
	"amqp.tls_ca_file":                  "",
	"amqp.tls_cert_file":                "",
	"amqp.tls_key_file":                 "",
	"amqp.tls_server_name":              "",
	"amqp.input_exchange":               "order.events",
	"amqp.queue":                        "mail.order-events",
	"amqp.binding_keys":                 []string{"order.confirmed", "order.cancelled"},
	"amqp.dead_letter_exchange":         "mail.dlx",
	"amqp.dead_letter_queue":            "mail.order-events.dlq",
	"amqp.events_exchange":              "mail.events",
	"amqp.events_queue":                 "",
	"amqp.declare_topology":             true,
	"amqp.prefetch":                     200,
	"amqp.batch_size":                   100,
	"amqp.delivery_limit":               20,
	"amqp.max_message_bytes":            262144,
	"amqp.redelivery_window":            336 * time.Hour,
	"amqp.reconnect_backoff":            500 * time.Millisecond,
	"amqp.reconnect_backoff_max":        2 * time.Second,
	"amqp.max_queue_length":             300000,
	"amqp.max_dead_letter_queue_length": 100000,
	"amqp.queue_limits":                 "arguments",
	"amqp.management_url":               "",

	"sender.provider":          "smtp",
	"sender.workers":           8,
	"sender.batch_size":        50,
	"sender.lease":             2 * time.Minute,
	"sender.send_timeout":      30 * time.Second,
	"sender.max_attempts":      8,
	"sender.ambiguous_policy":  "retry",
	"sender.ambiguous_retries": 1,
	"sender.retry_backoff":     5 * time.Second,
	"sender.retry_backoff_max": 30 * time.Minute,
	"sender.rate_limit":        0.0,
	"sender.poll_interval":     time.Second,
	"sender.shutdown_timeout":  20 * time.Second,
	"sender.fallback_provider": "",

	"sender.breaker_threshold":      3,
	"sender.breaker_probe_interval": 30 * time.Second,
	"sender.quota_probe_interval":   5 * time.Minute,
	"sender.slow_send_threshold":    5 * time.Second,
	"sender.slow_send_window":       20,
	"sender.slow_send_concurrency":  0,
	"sender.priority_weight":        4,

	"smtp.host":               "localhost",
	"smtp.port":               587,
	"smtp.username":           "",
	"smtp.password":           "",
	"smtp.password_file":      "",
	"smtp.tls":                "starttls",
	"smtp.tls_ca_file":        "",
	"smtp.tls_cert_file":      "",
	"smtp.tls_key_file":       "",
	"smtp.tls_server_name":    "",
	"smtp.idempotency_header": "",
	"smtp.rate_limit":         0.0,

	"resend.api_key":      "",
	"resend.api_key_file": "",
	"resend.base_url":     "https://api.resend.com/",
	// Resend's documented default account limit: 5 requests per second per
	// team (Resend API reference, "Usage Limits",
	// https://resend.com/docs/api-reference/rate-limit).
	"resend.rate_limit": ResendDefaultRateLimit,

	"mail.from":                     "",
	"mail.max_event_age":            24 * time.Hour,
	"mail.cancel_notice":            true,
	"mail.recipient_limit":          50,
	"mail.recipient_limit_window":   time.Hour,
	"mail.max_attachment_bytes":     int64(DefaultMaxAttachmentBytes),
	"attachments.allowed_hosts":     []string{},
	"attachments.allow_private":     false,
	"attachments.tls_ca_file":       "",
	"attachments.concurrency":       4,
	"attachments.timeout":           time.Minute,
	"attachments.min_rate":          4096,
	"attachments.progress_window":   10 * time.Second,
	"attachments.retry_backoff":     10 * time.Second,
	"attachments.retry_backoff_max": 10 * time.Minute,
	"attachments.poll_interval":     time.Second,
	"bounces.address":               "",
	"bounces.secret":                "",
	"bounces.secret_file":           "",
	"bounces.addr":                  "",
	"bounces.tls_cert_file":         "",
	"bounces.tls_key_file":          "",
	"bounces.max_message_bytes":     int64(1 << 20),
	"bounces.imap_url":              "",
	"bounces.imap_interval":         time.Minute,
	"bounces.notify":                "SUCCESS,FAILURE,DELAY",
	"suppression.scope":             "deployment",
	"suppression.transient_bounces": 3,
	"suppression.transient_window":  7 * 24 * time.Hour,
	"suppression.transient_expiry":  14 * 24 * time.Hour,
	"suppression.smtp_codes":        []string{"5.1.1", "5.1.2", "5.1.3", "5.1.6", "5.1.10", "5.2.1"},
	"mail.reply_to":                 "",
	"mail.idempotency_namespace":    "",

	// Resend's webhook retries (DefaultDeliveryConfirmAfter).
	"mail.delivery_confirm_after": DefaultDeliveryConfirmAfter,

	"relay.batch_size":        100,
	"relay.poll_interval":     time.Second,
	"relay.confirm_timeout":   10 * time.Second,
	"relay.max_attempts":      10,
	"relay.listen":            true,
	"relay.lease":             15 * time.Second,
	"relay.lease_renew":       5 * time.Second,
	"relay.lease_retry":       2 * time.Second,
	"relay.unroutable_window": 24 * time.Hour,

	"retention.window": 336 * time.Hour,

	"http.addr":  ":8080",
	"http.pprof": false,

	"webhooks.addr":               "",
	"webhooks.resend_secret":      "",
	"webhooks.resend_secret_file": "",

	"templates.dir":            "",
	"templates.default_locale": "vi",
	"templates.time_zone":      "Asia/Ho_Chi_Minh",

	"log.level":         "info",
	"log.mail_outcomes": "info",

	"serve.roles": []string{RoleConsumer, RoleSender, RoleRelay},

	"tracing.enabled": false,

	"console.addr":                          "",
	"console.public_url":                    "",
	"console.users":                         []any{},
	"console.tokens":                        []any{},
	"console.session_secret":                "",
	"console.session_secret_file":           "",
	"console.session_ttl":                   8 * time.Hour,
	"console.trusted_proxy_header":          "",
	"console.trusted_proxy_role_header":     "",
	"console.trusted_proxy_operator_groups": []string{},
	"console.trusted_proxy_default_role":    ConsoleViewer,
	"console.trusted_proxy_addresses":       []string{},
}
