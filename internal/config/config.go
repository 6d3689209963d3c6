// Package config loads and validates mailsvc's configuration: built-in
// defaults, then a YAML file, then MAILSVC_* environment variables (key
// "a.b_c" is MAILSVC_A_B_C). It is the only package that imports viper.
// configs/mailsvc.yaml documents every key.
//
// A component owns the section of its keys: their type (whose mapstructure
// and yaml names are the keys), their defaults and their rules
// (sender.Settings, relay.Settings, webhook.Settings; the consumer's
// amqp.* keys through consumer.Config.Check). This package decodes into
// those types, builds its table of defaults from them (defaultConfig),
// and checks its own sections and the rules that span sections.
package config

import (
	"slices"
	"time"

	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

// Config is the whole configuration. The yaml names are the config keys.
type Config struct {
	Database Database `mapstructure:"database" yaml:"database"`
	AMQP     AMQP     `mapstructure:"amqp" yaml:"amqp"`
	// Sender is the sender pool's section, owned by internal/sender.
	Sender sender.Settings `mapstructure:"sender" yaml:"sender"`
	SMTP   SMTP            `mapstructure:"smtp" yaml:"smtp"`
	Resend Resend          `mapstructure:"resend" yaml:"resend"`
	Mail   Mail            `mapstructure:"mail" yaml:"mail"`
	// Attachments configures the fetch of files by reference; owned by
	// internal/attach.
	Attachments attach.Settings `mapstructure:"attachments" yaml:"attachments"`
	// Relay is the outbox relay's section, owned by internal/relay.
	Relay     relay.Settings `mapstructure:"relay" yaml:"relay"`
	Retention Retention      `mapstructure:"retention" yaml:"retention"`
	HTTP      HTTP           `mapstructure:"http" yaml:"http"`
	// Webhooks is the listener of provider webhooks (Resend's
	// email.delivered, email.bounced, email.complained), apart from the
	// metrics and health server so that only it faces the internet; owned
	// by internal/webhook.
	Webhooks webhook.Settings `mapstructure:"webhooks" yaml:"webhooks"`
	// Suppression configures the suppression list.
	Suppression Suppression `mapstructure:"suppression" yaml:"suppression"`
	// Bounces configures SMTP's reports after the 250: VERP return paths
	// and the bounce listener.
	Bounces   Bounces   `mapstructure:"bounces" yaml:"bounces"`
	Templates Templates `mapstructure:"templates" yaml:"templates"`
	Log       Log       `mapstructure:"log" yaml:"log"`
	Serve     Serve     `mapstructure:"serve" yaml:"serve"`
	Tracing   Tracing   `mapstructure:"tracing" yaml:"tracing"`
	// Console configures the support console (console.go).
	Console Console `mapstructure:"console" yaml:"console"`

	// tls holds what Load read from the tls_* files (tls.go).
	tls loadedTLS
	// warnings are Load's (Warnings).
	warnings []string
}

// Database configures the PostgreSQL connection.
type Database struct {
	// URL is a pgx connection string. Direct, or through a pooler in
	// session or transaction mode (the relay leads by a lease row, not by
	// session state); behind transaction pooling add
	// default_query_exec_mode=exec to it, and run migrate directly (serve
	// and migrate refuse a transaction pooler they cannot work through,
	// app.checkPooling). TLS is
	// set with libpq's parameters in it: sslmode=verify-full, sslrootcert,
	// sslcert, sslkey (tls.go checks them at start).
	URL URL `mapstructure:"url" yaml:"url"`
	// MaxConns is the pool size; 0 means pgx's default (max(4, CPUs)).
	MaxConns int32 `mapstructure:"max_conns" yaml:"max_conns"`
}

// AMQP configures RabbitMQ: input topology, dead-lettering and the events
// exchange.
type AMQP struct {
	// URL is an amqp:// or amqps:// URL; amqps:// uses the TLS* files.
	URL URL `mapstructure:"url" yaml:"url"`
	// TLSCAFile, TLSCertFile, TLSKeyFile and TLSServerName configure TLS
	// for an amqps:// URL, on every connection (consumer, relay, emit,
	// dlq replay): a PEM CA bundle instead of the system roots, a client
	// certificate and its key, and the name the broker's certificate must
	// carry instead of the URL's host. "" means unset.
	TLSCAFile          string   `mapstructure:"tls_ca_file" yaml:"tls_ca_file"`
	TLSCertFile        string   `mapstructure:"tls_cert_file" yaml:"tls_cert_file"`
	TLSKeyFile         string   `mapstructure:"tls_key_file" yaml:"tls_key_file"`
	TLSServerName      string   `mapstructure:"tls_server_name" yaml:"tls_server_name"`
	InputExchange      string   `mapstructure:"input_exchange" yaml:"input_exchange"`
	Queue              string   `mapstructure:"queue" yaml:"queue"`
	BindingKeys        []string `mapstructure:"binding_keys" yaml:"binding_keys"`
	DeadLetterExchange string   `mapstructure:"dead_letter_exchange" yaml:"dead_letter_exchange"`
	DeadLetterQueue    string   `mapstructure:"dead_letter_queue" yaml:"dead_letter_queue"`
	EventsExchange     string   `mapstructure:"events_exchange" yaml:"events_exchange"`
	// EventsQueue, when set, is a durable queue declared and bound with "#"
	// to EventsExchange, so feedback events are kept where no consumer
	// service has bound its own queue yet (development, demos). "" means
	// none: the order services bind their own queues.
	EventsQueue string `mapstructure:"events_queue" yaml:"events_queue"`
	// DeclareTopology declares exchanges and queues at start (idempotent).
	DeclareTopology bool `mapstructure:"declare_topology" yaml:"declare_topology"`
	// Prefetch is the QoS prefetch count (unacked deliveries per consumer).
	Prefetch int `mapstructure:"prefetch" yaml:"prefetch"`
	// BatchSize is how many deliveries at most one DB transaction records.
	BatchSize int `mapstructure:"batch_size" yaml:"batch_size"`
	// DeliveryLimit is the quorum queue's x-delivery-limit: deliveries
	// before the broker dead-letters a message by itself.
	DeliveryLimit int `mapstructure:"delivery_limit" yaml:"delivery_limit"`
	// MaxMessageBytes is the largest body accepted, in bytes; larger ones
	// are dead-lettered with reason too_large.
	MaxMessageBytes int `mapstructure:"max_message_bytes" yaml:"max_message_bytes"`
	// RedeliveryWindow is how long the broker or a producer may redeliver
	// or replay an event; retention.window must be at least this.
	RedeliveryWindow time.Duration `mapstructure:"redelivery_window" yaml:"redelivery_window"`
	// ReconnectBackoff and ReconnectBackoffMax bound the capped exponential
	// backoff (with jitter) between reconnect attempts; the max is at most
	// MaxReconnectBackoff (4 s), so a reconnect meets the broker's return
	// within 5 s.
	ReconnectBackoff    time.Duration `mapstructure:"reconnect_backoff" yaml:"reconnect_backoff"`
	ReconnectBackoffMax time.Duration `mapstructure:"reconnect_backoff_max" yaml:"reconnect_backoff_max"`
	// MaxQueueLength is the input queue's x-max-length, in ready messages:
	// beyond it the broker nacks the producers' publishes (x-overflow
	// reject-publish) instead of filling its memory during an outage.
	MaxQueueLength int `mapstructure:"max_queue_length" yaml:"max_queue_length"`
	// MaxDeadLetterQueueLength is the dead-letter queue's x-max-length; a
	// full one makes the consumer hold poison messages unacknowledged.
	MaxDeadLetterQueueLength int `mapstructure:"max_dead_letter_queue_length" yaml:"max_dead_letter_queue_length"`
	// QueueLimits is "arguments" (the lengths are queue arguments, set
	// when mailsvc declares the queues) or "policy" (they are left out of
	// the declarations, for queues created without them, and a RabbitMQ
	// policy sets them).
	QueueLimits string `mapstructure:"queue_limits" yaml:"queue_limits"`
	// ManagementURL, when set, is RabbitMQ's management API
	// (http://user:password@host:15672/), the one source of the input
	// queue's unacknowledged count; "" reads the queues over AMQP.
	ManagementURL URL `mapstructure:"management_url" yaml:"management_url"`
}

// SMTP configures the SMTP provider.
type SMTP struct {
	Host     string `mapstructure:"host" yaml:"host"`
	Port     int    `mapstructure:"port" yaml:"port"`
	Username string `mapstructure:"username" yaml:"username"`
	Password Secret `mapstructure:"password" yaml:"password"`
	// PasswordFile, when set, is read for the password.
	PasswordFile string `mapstructure:"password_file" yaml:"password_file"`
	// TLS is "starttls" (required), "implicit", "opportunistic" or "none".
	TLS string `mapstructure:"tls" yaml:"tls"`
	// TLSCAFile, TLSCertFile, TLSKeyFile and TLSServerName configure the
	// TLS of starttls and implicit: a PEM CA bundle instead of the system
	// roots, a client certificate and its key, and the name the server's
	// certificate must carry instead of Host. "" means unset.
	TLSCAFile     string `mapstructure:"tls_ca_file" yaml:"tls_ca_file"`
	TLSCertFile   string `mapstructure:"tls_cert_file" yaml:"tls_cert_file"`
	TLSKeyFile    string `mapstructure:"tls_key_file" yaml:"tls_key_file"`
	TLSServerName string `mapstructure:"tls_server_name" yaml:"tls_server_name"`
	// IdempotencyHeader, when set, is a mail header carrying the
	// idempotency key, for relays that honour one (Resend's SMTP relay reads
	// Resend-Idempotency-Key, EmailEngine X-EE-Idempotency-Key).
	IdempotencyHeader string `mapstructure:"idempotency_header" yaml:"idempotency_header"`
	// RateLimit is the relay's limit in sends per second for the whole
	// deployment, shared by every replica through PostgreSQL; 0 = none.
	RateLimit float64 `mapstructure:"rate_limit" yaml:"rate_limit"`
}

// Resend configures the Resend HTTP API provider.
type Resend struct {
	APIKey Secret `mapstructure:"api_key" yaml:"api_key"`
	// APIKeyFile, when set, is read for the API key.
	APIKeyFile string `mapstructure:"api_key_file" yaml:"api_key_file"`
	BaseURL    string `mapstructure:"base_url" yaml:"base_url"`
	// RateLimit is the account's limit in requests per second for the
	// whole deployment, shared by every replica through PostgreSQL
	// (default ResendDefaultRateLimit); 0 = none.
	RateLimit float64 `mapstructure:"rate_limit" yaml:"rate_limit"`
}

// Mail configures the mails themselves.
type Mail struct {
	// From is the sender address, e.g. "Shop <orders@example.com>".
	// Stored with each mail row when it is written: a change applies to new
	// mails only.
	From string `mapstructure:"from" yaml:"from"`
	// ReplyTo, when set, is the Reply-To address of new mails.
	ReplyTo string `mapstructure:"reply_to" yaml:"reply_to"`
	// IdempotencyNamespace prefixes every provider idempotency key (Resend's
	// Idempotency-Key, smtp.idempotency_header); "" means the deployment id
	// that `mailsvc migrate` generated in the database.
	IdempotencyNamespace string `mapstructure:"idempotency_namespace" yaml:"idempotency_namespace"`
	// MaxEventAge is the default oldest event that is still sent; older
	// ones are recorded as failed with reason stale.
	MaxEventAge time.Duration `mapstructure:"max_event_age" yaml:"max_event_age"`
	// CancelNotice turns on the cancellation notice: when an OrderCancelled
	// comes after its confirmation was, or may have been, delivered, the
	// customer is mailed the order_cancelled template.
	CancelNotice bool `mapstructure:"cancel_notice" yaml:"cancel_notice"`
	// RecipientLimit is the per-recipient safety limit: at most this many
	// mails for one address (compared lower-cased) are sent per
	// RecipientLimitWindow; the ones over it are recorded held, until an
	// operator releases or cancels them. 0 turns it off.
	RecipientLimit int `mapstructure:"recipient_limit" yaml:"recipient_limit"`
	// RecipientLimitWindow is the fixed window the limit counts in,
	// aligned to the Unix epoch on the database's clock; whole seconds.
	RecipientLimitWindow time.Duration `mapstructure:"recipient_limit_window" yaml:"recipient_limit_window"`
	// DeliveryConfirmAfter is how long after its send a sent mail of a
	// provider that reports deliveries (Config.ReportsDeliveries) may go
	// without a delivery, bounce or complaint report before it is flagged
	// "delivery unconfirmed" (docs/design.md, "Delivery unconfirmed"): a
	// metric, `mail list --unconfirmed`, a line in `mail show`. The flag
	// changes nothing and never resends. 0 turns it off; otherwise 1m to
	// retention.window.
	DeliveryConfirmAfter time.Duration `mapstructure:"delivery_confirm_after" yaml:"delivery_confirm_after"`
	// MaxAttachmentBytes is the most bytes of attachments one mail may
	// carry in total, before base64; 1 KiB to MaxAttachmentBytesLimit.
	MaxAttachmentBytes int64 `mapstructure:"max_attachment_bytes" yaml:"max_attachment_bytes"`
}

// Retention configures how long finished rows are kept.
type Retention struct {
	// Window is the least time sent, failed and cancelled rows (and
	// published outbox rows) are kept; published feedback events can be
	// republished (`mailsvc outbox republish`) for this long after their
	// publication.
	Window time.Duration `mapstructure:"window" yaml:"window"`
}

// HTTP configures the metrics and health server.
type HTTP struct {
	Addr string `mapstructure:"addr" yaml:"addr"`
	// Pprof serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/ on Addr: CPU (/debug/pprof/profile?seconds=N), heap,
	// goroutines, and the rest. Off by default: a profile shows the
	// program's internals, and a CPU profile costs a few percent of CPU
	// while it runs.
	Pprof bool `mapstructure:"pprof" yaml:"pprof"`
}

// Bounces configures what SMTP says after the 250 (internal/bounce).
type Bounces struct {
	// Address is the bounce address, local@domain (e.g.
	// bounces@bounce.shop.example). With Secret set, every SMTP mail goes
	// out with the envelope sender local+TOKEN@domain naming it; the
	// domain's MX must reach Addr. "" (the default) turns VERP off.
	Address string `mapstructure:"address" yaml:"address"`
	// Secret keys the tokens' HMAC; at least 16 bytes. Required with
	// Address.
	Secret Secret `mapstructure:"secret" yaml:"secret"`
	// SecretFile, when set, is read for Secret.
	SecretFile string `mapstructure:"secret_file" yaml:"secret_file"`
	// Addr is the bounce listener's host:port (SMTP for the domain of
	// Address only); "" runs none (reports reach another replica's).
	Addr string `mapstructure:"addr" yaml:"addr"`
	// TLSCertFile and TLSKeyFile, when set, are offered with STARTTLS.
	TLSCertFile string `mapstructure:"tls_cert_file" yaml:"tls_cert_file"`
	TLSKeyFile  string `mapstructure:"tls_key_file" yaml:"tls_key_file"`
	// MaxMessageBytes bounds one report.
	MaxMessageBytes int64 `mapstructure:"max_message_bytes" yaml:"max_message_bytes"`
	// Notify is the DSN NOTIFY asked of a relay that offers DSN (RFC
	// 3461): FAILURE, DELAY and SUCCESS, comma separated, or NEVER; ""
	// asks nothing. The default, SUCCESS,FAILURE,DELAY, asks for a
	// success report too: the only proof that settles an SMTP mail whose
	// 250 was lost (`unknown`) without an operator. It costs one report
	// per delivered mail to the bounce listener or mailbox; no relay can
	// know in advance which send will lose its reply, so every mail asks.
	Notify string `mapstructure:"notify" yaml:"notify"`
	// IMAPURL, when set, is a mailbox where reports land instead of (or
	// besides) the listener: imaps://USER:PASSWORD@HOST[:PORT]/MAILBOX.
	// Processed reports are deleted; others are flagged and left.
	IMAPURL URL `mapstructure:"imap_url" yaml:"imap_url"`
	// IMAPInterval is the time between two polls of IMAPURL.
	IMAPInterval time.Duration `mapstructure:"imap_interval" yaml:"imap_interval"`
}

// Suppression configures the suppression list.
type Suppression struct {
	// Scope says whose mail a provider's report may suppress an address
	// for. "deployment" (the default): a bounce or complaint suppresses
	// only the recipient of a mail this deployment sent; a report for any
	// other mail of the provider account is counted unmatched and
	// suppresses nothing. "account": the provider account serves this
	// deployment alone, so such a report suppresses the addresses it gives.
	Scope string `mapstructure:"scope" yaml:"scope"`
	// SMTPCodes are the enhanced status codes (RFC 3463) of a permanent
	// SMTP refusal, at RCPT or after DATA, that put the recipient on the
	// suppression list (source smtp/reject): the address does not exist or
	// cannot take mail. A 4.x.x reply never suppresses. Empty: none does.
	SMTPCodes []string `mapstructure:"smtp_codes" yaml:"smtp_codes"`
	// TransientBounces transient bounces of one address within
	// TransientWindow suppress it for TransientExpiry (source
	// webhook/transient); a single one never does. 0 turns it off.
	TransientBounces int           `mapstructure:"transient_bounces" yaml:"transient_bounces"`
	TransientWindow  time.Duration `mapstructure:"transient_window" yaml:"transient_window"`
	TransientExpiry  time.Duration `mapstructure:"transient_expiry" yaml:"transient_expiry"`
}

// Templates configures mail rendering.
type Templates struct {
	// Dir is an optional directory whose templates override the embedded ones.
	Dir           string `mapstructure:"dir" yaml:"dir"`
	DefaultLocale string `mapstructure:"default_locale" yaml:"default_locale"`
	// TimeZone is an IANA zone name used for dates in mails.
	TimeZone string `mapstructure:"time_zone" yaml:"time_zone"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `mapstructure:"level" yaml:"level"`
	// MailOutcomes is the level, info or debug, of the "mail finished"
	// line of a mail that ended sent or cancelled (failed and unknown ones
	// are logged at warn).
	MailOutcomes string `mapstructure:"mail_outcomes" yaml:"mail_outcomes"`
}

// The roles `mailsvc serve` can run (serve.roles).
const (
	// RoleConsumer takes the input events from amqp.queue into the database.
	RoleConsumer = "consumer"
	// RoleSender runs the sender pool and the janitor.
	RoleSender = "sender"
	// RoleRelay runs the outbox relay (one active replica, by lease).
	RoleRelay = "relay"
)

// Roles lists every role, in the order serve.roles documents them.
var Roles = []string{RoleConsumer, RoleSender, RoleRelay}

// Serve configures `mailsvc serve`.
type Serve struct {
	// Roles are the parts this process runs, a non-empty subset of Roles
	// (the --roles flag overrides it).
	Roles []string `mapstructure:"roles" yaml:"roles"`
}

// HasRole reports whether serve.roles includes role.
func (s Serve) HasRole(role string) bool { return slices.Contains(s.Roles, role) }

// Tracing configures OpenTelemetry tracing (internal/tracing).
type Tracing struct {
	// Enabled turns tracing on: spans of consume, send and publish,
	// exported over OTLP as the standard OTEL_* environment variables say
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
	// OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...), and the traceparent
	// header on every feedback event. Off (the default), no span is made
	// and no trace context is read, stored or published.
	Enabled bool `mapstructure:"enabled" yaml:"enabled"`
}
