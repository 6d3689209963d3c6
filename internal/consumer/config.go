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
	// broker sends ahead; 0 means 200.
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

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	setInt(&c.Prefetch, 200)
	setInt(&c.BatchSize, min(100, c.Prefetch))
	setInt(&c.MaxInFlight, 2)
	setInt(&c.DeliveryLimit, 20)
	setInt(&c.MaxQueueLength, DefaultMaxQueueLength)
	setInt(&c.MaxDeadLetterQueueLength, DefaultMaxDeadLetterQueueLength)
	setInt(&c.MaxMessageBytes, 262144)
	setDuration(&c.MaxEventAge, 24*time.Hour)
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

// Validate reports every invalid field at once (errors.Join).
func (c Config) Validate() error {
	var errs []error
	for name, v := range map[string]string{
		"URL": c.URL, "InputExchange": c.InputExchange, "Queue": c.Queue,
		"DeadLetterExchange": c.DeadLetterExchange, "DeadLetterQueue": c.DeadLetterQueue,
	} {
		if v == "" {
			errs = append(errs, fmt.Errorf("consumer: %s must not be empty", name))
		}
	}
	if len(c.BindingKeys) == 0 {
		errs = append(errs, errors.New("consumer: BindingKeys must name at least one routing key"))
	}
	if c.Prefetch < 0 || c.BatchSize < 0 || c.BatchSize > c.Prefetch || c.BatchSize > broker.MaxBatch {
		errs = append(errs, fmt.Errorf("consumer: BatchSize (%d) must be between 1 and Prefetch (%d) and at most %d", c.BatchSize, c.Prefetch, broker.MaxBatch))
	}
	if c.DeliveryLimit < 0 || c.MaxMessageBytes < 0 || c.MaxQueueLength < 0 || c.MaxDeadLetterQueueLength < 0 {
		errs = append(errs, errors.New("consumer: DeliveryLimit, MaxMessageBytes, MaxQueueLength and MaxDeadLetterQueueLength must be positive"))
	}
	return errors.Join(errs...)
}

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
