package consumer

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// deadLetterBindingKey binds the dead-letter queue to every routing key:
// a dead-lettered message keeps its original routing key, which `mailsvc
// dlq replay` uses to send it back.
const deadLetterBindingKey = "#"

// queueArgs are the input queue's arguments. Every one exists in RabbitMQ
// 3.10 and means the same on 4.x:
//   - x-queue-type quorum: replicated, durable, counts deliveries;
//   - x-delivery-limit: set explicitly, so 3.10 (no default) and 4.x
//     (default 20) behave alike; a message returned more often than this
//     is dead-lettered by the broker itself (x-death reason delivery_limit);
//   - x-dead-letter-exchange: where the broker dead-letters; the routing
//     key stays the message's own (no x-dead-letter-routing-key);
//   - x-dead-letter-strategy at-least-once (3.10+) with x-overflow
//     reject-publish, which it requires: the broker keeps a dead-lettered
//     message until the dead-letter queue confirmed it, instead of the
//     default at-most-once transfer that can lose it. No max length is
//     set, so reject-publish never refuses a publish.
//
// Changing any of these on an existing queue makes the declaration fail
// with PRECONDITION_FAILED: delete and re-create the queue, or manage it
// with a policy and set amqp.declare_topology to false.
func queueArgs(c Config) amqp.Table {
	return amqp.Table{
		"x-queue-type":           "quorum",
		"x-delivery-limit":       int64(c.DeliveryLimit),
		"x-dead-letter-exchange": c.DeadLetterExchange,
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	}
}

// deadLetterQueueArgs: a quorum queue whose delivery limit is set so high
// that it is never reached. Without it RabbitMQ 4.x applies its default of
// 20, and every `dlq replay --dry-run` (which returns what it read) counts a
// delivery: the 20th would drop dead-lettered messages, since this queue
// has no dead-letter target of its own. Explicit, so 3.10 and 4.x agree.
var deadLetterQueueArgs = amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(DeadLetterQueueDeliveryLimit)}

// DeadLetterQueueDeliveryLimit is the x-delivery-limit of the dead-letter
// queue: high enough that replays and dry runs never reach it.
const DeadLetterQueueDeliveryLimit = 1_000_000

// DeclareTopology declares, idempotently and on a channel of its own (a
// refused declaration closes its channel): the dead-letter exchange
// (topic, durable) and queue (quorum) bound with "#", then the input
// exchange (topic, durable) and queue (quorum, see queueArgs) bound with
// every binding key of c. The consumer calls it at every (re)connect when
// c.DeclareTopology is set. It returns the broker's error, explained when a
// queue or exchange exists with other settings.
func DeclareTopology(conn *amqp.Connection, c Config) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open declare channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(c.DeadLetterExchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return declareError("exchange", c.DeadLetterExchange, err)
	}
	if _, err := ch.QueueDeclare(c.DeadLetterQueue, true, false, false, false, deadLetterQueueArgs); err != nil {
		return declareError("queue", c.DeadLetterQueue, err)
	}
	if err := ch.QueueBind(c.DeadLetterQueue, deadLetterBindingKey, c.DeadLetterExchange, false, nil); err != nil {
		return declareError("binding of", c.DeadLetterQueue, err)
	}
	if err := ch.ExchangeDeclare(c.InputExchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return declareError("exchange", c.InputExchange, err)
	}
	if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, queueArgs(c)); err != nil {
		return declareError("queue", c.Queue, err)
	}
	for _, key := range c.BindingKeys {
		if err := ch.QueueBind(c.Queue, key, c.InputExchange, false, nil); err != nil {
			return declareError("binding of", c.Queue, err)
		}
	}
	return nil
}

func declareError(what, name string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return fmt.Errorf("declare %s %s: it exists with other settings (re-create it, or set amqp.declare_topology false): %w", what, name, err)
	}
	return fmt.Errorf("declare %s %s: %w", what, name, err)
}
