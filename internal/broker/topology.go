package broker

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTopologyMismatch is wrapped by Conn.Declare when an exchange or queue
// exists with other settings (the broker's PRECONDITION_FAILED).
var ErrTopologyMismatch = errors.New("it exists with other settings")

// Topology is a set of routes to declare, in order.
type Topology []Route

// Route is an exchange, a queue and the queue's bindings to it.
type Route struct {
	// Exchange is a durable topic exchange.
	Exchange string
	// Queue is bound to Exchange with each of BindingKeys.
	Queue       Queue
	BindingKeys []string
}

// Queue describes a durable quorum queue (replicated, counts deliveries).
//
// Each field is a queue argument that exists in RabbitMQ 3.10 and means
// the same on 4.x. Changing one on an existing queue makes its
// declaration fail with ErrTopologyMismatch: the queue must be deleted and
// declared again, or managed with a policy instead.
type Queue struct {
	Name string
	// DeliveryLimit is x-delivery-limit, in deliveries, always set (0 is
	// not "unlimited"): 3.10 has no default and 4.x defaults to 20. A
	// message returned more often than this is dead-lettered by the broker
	// itself (x-death reason delivery_limit), or dropped when the queue
	// has no DeadLetterExchange.
	DeliveryLimit int
	// DeadLetterExchange, when set, is x-dead-letter-exchange: where the
	// broker dead-letters, keeping the message's routing key (no
	// x-dead-letter-routing-key). It comes with x-dead-letter-strategy
	// at-least-once (3.10+) and the x-overflow reject-publish it requires:
	// the broker keeps a dead-lettered message until the dead-letter queue
	// confirmed it, instead of the default at-most-once transfer that can
	// lose it. No max length is set, so reject-publish never refuses a
	// publish.
	DeadLetterExchange string
}

func (q Queue) args() amqp.Table {
	a := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(q.DeliveryLimit)}
	if q.DeadLetterExchange != "" {
		a["x-dead-letter-exchange"] = q.DeadLetterExchange
		a["x-dead-letter-strategy"] = "at-least-once"
		a["x-overflow"] = "reject-publish"
	}
	return a
}

// Declare declares t idempotently, route by route (exchange, queue,
// bindings), on a channel of its own (a refused declaration closes its
// channel). It stops at the first error, which names what was refused and
// wraps ErrTopologyMismatch when it exists with other settings.
func (c *Conn) Declare(t Topology) error {
	ch, err := c.c.Channel()
	if err != nil {
		return fmt.Errorf("open declare channel: %w", err)
	}
	defer ch.Close()
	for _, r := range t {
		if err := ch.ExchangeDeclare(r.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return declareError("exchange", r.Exchange, err)
		}
		if _, err := ch.QueueDeclare(r.Queue.Name, true, false, false, false, r.Queue.args()); err != nil {
			return declareError("queue", r.Queue.Name, err)
		}
		for _, key := range r.BindingKeys {
			if err := ch.QueueBind(r.Queue.Name, key, r.Exchange, false, nil); err != nil {
				return declareError("binding of", r.Queue.Name, err)
			}
		}
	}
	return nil
}

func declareError(what, name string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return fmt.Errorf("declare %s %s: %w: %w", what, name, ErrTopologyMismatch, err)
	}
	return fmt.Errorf("declare %s %s: %w", what, name, err)
}
