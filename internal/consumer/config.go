package consumer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// Config configures a Consumer. The daemon fills it from the amqp.* and
// mail.* keys (app.ConsumerConfig); WithDefaults fills what is left zero.
type Config struct {
	// URL is the broker's amqp:// or amqps:// URL.
	URL string
	// TLS is the client TLS configuration of an amqps:// URL
	// (broker.Config.TLS; amqp.tls_*); nil means the system roots.
	TLS *tls.Config
	// ConnectionName is shown in the RabbitMQ management UI; "" means
	// "mailsvc-consumer".
	ConnectionName string
	// InputExchange (topic), Queue (quorum) and BindingKeys are the input
	// topology (amqp.input_exchange, amqp.queue, amqp.binding_keys).
	InputExchange string
	Queue         string
	BindingKeys   []string
	// DeadLetterExchange (topic) and DeadLetterQueue (quorum, bound with
	// "#") receive poison messages and messages over the delivery limit.
	DeadLetterExchange string
	DeadLetterQueue    string
	// DeclareTopology declares exchanges, queues and bindings at every
	// (re)connect, idempotently (amqp.declare_topology).
	DeclareTopology bool
	// MaxQueueLength is Queue's x-max-length, in ready messages
	// (amqp.max_queue_length); 0 means DefaultMaxQueueLength. Beyond it
	// the broker nacks the producers' publishes (x-overflow
	// reject-publish), so an outage pushes back on their outboxes instead
	// of filling the broker.
	MaxQueueLength int
	// MaxDeadLetterQueueLength is DeadLetterQueue's x-max-length
	// (amqp.max_dead_letter_queue_length); 0 means
	// DefaultMaxDeadLetterQueueLength. A full dead-letter queue refuses
	// dead letters: the consumer holds them unacknowledged and retries
	// (hold.go), and the broker keeps those it dead-letters itself in the
	// input queue (at-least-once dead-lettering).
	MaxDeadLetterQueueLength int
	// LimitsByPolicy leaves x-max-length (and the dead-letter queue's
	// x-overflow) out of the declarations, for queues declared before the
	// limits existed, whose arguments RabbitMQ will not change: a policy
	// sets the limits instead (amqp.queue_limits: policy; the start-up
	// error of DeclareTopology prints the rabbitmqctl line).
	LimitsByPolicy bool
	// Prefetch is the QoS prefetch count: unacknowledged deliveries the
	// broker sends ahead; 0 means 200, at most MaxPrefetch.
	Prefetch int
	// BatchSize is the most deliveries recorded in one database
	// transaction and acknowledged together; 0 means 100. It must not
	// exceed Prefetch.
	BatchSize int
	// MaxInFlight is the most batches recorded at once (each in its own
	// transaction; acks still go in delivery order); 0 means 2.
	MaxInFlight int
	// DeliveryLimit is the queue's x-delivery-limit, in deliveries; 0
	// means 20 (RabbitMQ 4.x's own default).
	DeliveryLimit int
	// MaxMessageBytes is the largest body accepted, in bytes; 0 means
	// 262144. Larger ones are dead-lettered with reason too_large.
	MaxMessageBytes int
	// MaxEventAge is the oldest OrderConfirmed still sent (mail.max_event_age);
	// a template's own MaxEventAge overrides it. 0 means 24h.
	MaxEventAge time.Duration
	// MailFrom is mail.from, stored with every new mail row as its From;
	// its domain is the right-hand side of every Message-ID.
	MailFrom string
	// MailReplyTo is mail.reply_to, stored with every new mail row ("" for
	// no Reply-To).
	MailReplyTo string
	// IdempotencyNamespace prefixes the idempotency key stored with every
	// new mail row (mailtype.IdempotencyKey); the daemon sets the resolved
	// mail.idempotency_namespace (store.IdempotencyNamespace).
	IdempotencyNamespace string
	// Attachments is what data.attachments may carry
	// (attachments.allowed_hosts non-empty, mail.max_attachment_bytes).
	Attachments AttachmentRules
	// ReconnectBackoff and ReconnectBackoffMax bound the delay between
	// reconnects (capped exponential, jitter); 0 means
	// broker.DefaultBackoff and broker.DefaultBackoffMax (500ms and 2s).
	ReconnectBackoff, ReconnectBackoffMax time.Duration
	// RetryBackoff and RetryBackoffMax bound the delay between attempts to
	// record a batch while the database fails; 0 means 100ms and 5s.
	RetryBackoff, RetryBackoffMax time.Duration
	// StatementTimeout bounds one attempt to record a batch; 0 means 30s.
	StatementTimeout time.Duration
	// ConfirmTimeout bounds the wait for the publisher confirm of a
	// dead-lettered message; 0 means 10s.
	ConfirmTimeout time.Duration
	// HoldBackoffMax is the longest wait between two attempts to
	// dead-letter a message the dead-letter queue refused (hold.go); the
	// first wait is RetryBackoff. 0 means 30s.
	HoldBackoffMax time.Duration
}

// Defaults of the queue length limits. DefaultMaxQueueLength rides out
// five hours of a peak of 60,000 events an hour (17/s) with nothing
// consumed; at the ≈1 KB of broker memory per queued message measured on
// RabbitMQ 3.10 (200,000 messages of 1.5 KB raised its resident memory by
// 170 MB, with peaks twice that while it wrote its log), that is about
// 300 MB, well under the memory alarm of a broker with a few GB. A
// dead-letter queue holds poison messages until a replay; 100,000 is a
// producer sending nothing but poison for an hour and a half at that peak.
const (
	DefaultMaxQueueLength           = 300_000
	DefaultMaxDeadLetterQueueLength = 100_000
)

// The defaults of the consumer's other keyed fields, written once: the
// defaults of amqp.prefetch, amqp.batch_size, amqp.delivery_limit (RabbitMQ
// 4.x's own), amqp.max_message_bytes and mail.max_event_age, which
// internal/config's table takes from here.
const (
	DefaultPrefetch        = 200
	DefaultBatchSize       = 100
	DefaultDeliveryLimit   = 20
	DefaultMaxMessageBytes = 262144
	DefaultMaxEventAge     = 24 * time.Hour
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	setInt(&c.Prefetch, DefaultPrefetch)
	setInt(&c.BatchSize, min(DefaultBatchSize, c.Prefetch))
	setInt(&c.MaxInFlight, 2)
	setInt(&c.DeliveryLimit, DefaultDeliveryLimit)
	setInt(&c.MaxQueueLength, DefaultMaxQueueLength)
	setInt(&c.MaxDeadLetterQueueLength, DefaultMaxDeadLetterQueueLength)
	setInt(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	setDuration(&c.MaxEventAge, DefaultMaxEventAge)
	setDuration(&c.ReconnectBackoff, broker.DefaultBackoff)
	setDuration(&c.ReconnectBackoffMax, broker.DefaultBackoffMax)
	setDuration(&c.RetryBackoff, 100*time.Millisecond)
	setDuration(&c.RetryBackoffMax, 5*time.Second)
	setDuration(&c.StatementTimeout, 30*time.Second)
	setDuration(&c.ConfirmTimeout, 10*time.Second)
	setDuration(&c.HoldBackoffMax, 30*time.Second)
	if c.ConnectionName == "" {
		c.ConnectionName = "mailsvc-consumer"
	}
	return c
}

// Report receives one violation of a configuration rule: the full key
// it is about and the message (a format and its arguments).
type Report func(key, format string, args ...any)

// Validate reports every invalid field at once (errors.Join): an empty
// URL, then Check's rules in their order.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("amqp.url: must not be empty"))
	}
	c.Check(func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	})
	return errors.Join(errs...)
}

// Check reports every rule of the consumer's keys (amqp.*: the input
// topology, its limits and the batch) that c breaks, in a fixed order,
// each under its full key. The daemon's configuration check runs it on
// the Config the keys map to, before any default fills a zero; the
// broker URL's form is checked there, with the other connections.
func (c Config) Check(bad Report) {
	for _, n := range []struct{ key, v string }{
		{"amqp.input_exchange", c.InputExchange}, {"amqp.queue", c.Queue},
		{"amqp.dead_letter_exchange", c.DeadLetterExchange}, {"amqp.dead_letter_queue", c.DeadLetterQueue},
	} {
		if n.v == "" {
			bad(n.key, "must not be empty")
		}
	}
	if len(c.BindingKeys) == 0 {
		bad("amqp.binding_keys", "must name at least one routing key")
	}
	for _, n := range []struct {
		key string
		n   int
	}{
		{"amqp.prefetch", c.Prefetch}, {"amqp.batch_size", c.BatchSize}, {"amqp.delivery_limit", c.DeliveryLimit},
		{"amqp.max_message_bytes", c.MaxMessageBytes}, {"amqp.max_queue_length", c.MaxQueueLength},
		{"amqp.max_dead_letter_queue_length", c.MaxDeadLetterQueueLength},
	} {
		if n.n <= 0 {
			bad(n.key, "must be positive, got %d", n.n)
		}
	}
	if c.Prefetch > MaxPrefetch {
		bad("amqp.prefetch", "(%d) must be at most %d (AMQP's prefetch count is 16 bits: more wraps around, 65536 to unlimited)", c.Prefetch, MaxPrefetch)
	}
	if c.BatchSize > c.Prefetch {
		bad("amqp.batch_size", "(%d) must not exceed amqp.prefetch (%d)", c.BatchSize, c.Prefetch)
	}
	if c.BatchSize > broker.MaxBatch {
		bad("amqp.batch_size", "(%d) must be at most %d", c.BatchSize, broker.MaxBatch)
	}
}

// MaxPrefetch is the largest amqp.prefetch: basic.qos carries the
// prefetch count in 16 bits (AMQP 0-9-1, "basic.qos"; amqp091-go
// converts it with uint16), so 65536 would become 0, unlimited.
const MaxPrefetch = 65535

func setInt(p *int, def int) {
	if *p <= 0 {
		*p = def
	}
}

func setDuration(p *time.Duration, def time.Duration) {
	if *p <= 0 {
		*p = def
	}
}
