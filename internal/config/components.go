package config

import "github.com/mailsvc/mailsvc/internal/consumer"

// Consumer is the consumer's part of the configuration: amqp.url and
// amqp.tls_*, the amqp.* keys of the input topology, and mail.*.
// IdempotencyNamespace is the key's raw value; serve replaces it with the
// resolved one (store.IdempotencyNamespace). Validate checks the
// consumer's keys on it (consumer.Config.Check).
func (c *Config) Consumer() consumer.Config {
	a := c.AMQP
	return consumer.Config{
		URL: a.URL.Reveal(), TLS: c.AMQPTLS(), ConnectionName: "mailsvc-consumer",
		InputExchange: a.InputExchange, Queue: a.Queue, BindingKeys: a.BindingKeys,
		DeadLetterExchange: a.DeadLetterExchange, DeadLetterQueue: a.DeadLetterQueue,
		DeclareTopology: a.DeclareTopology, Prefetch: a.Prefetch, BatchSize: a.BatchSize,
		DeliveryLimit: a.DeliveryLimit, MaxMessageBytes: a.MaxMessageBytes,
		MaxQueueLength: a.MaxQueueLength, MaxDeadLetterQueueLength: a.MaxDeadLetterQueueLength,
		LimitsByPolicy: a.QueueLimits == "policy",
		MaxEventAge:    c.Mail.MaxEventAge, MailFrom: c.Mail.From, MailReplyTo: c.Mail.ReplyTo,
		IdempotencyNamespace: c.Mail.IdempotencyNamespace,
		Attachments:          consumer.AttachmentRules{Enabled: c.Attachments.Enabled(), MaxBytes: c.Mail.MaxAttachmentBytes},
		ReconnectBackoff:     a.ReconnectBackoff, ReconnectBackoffMax: a.ReconnectBackoffMax,
	}
}
