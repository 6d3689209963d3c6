package broker

import (
	"errors"
	"fmt"
	"regexp"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTopologyMismatch is wrapped by Conn.Declare when an exchange or queue
// exists with other settings (the broker's PRECONDITION_FAILED). The error
// is a *MismatchError too.
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
	// lose it.
	DeadLetterExchange string
	// MaxLength, when positive, is x-max-length, in ready messages, with
	// x-overflow reject-publish: once the queue holds that many, the
	// broker refuses a publish with basic.nack (publisher confirms) and
	// refuses the transfer of a message dead-lettered into it (which the
	// at-least-once strategy of the source queue keeps and retries), never
	// dropping one. Unacknowledged deliveries do not count. RabbitMQ 3.10's
	// quorum queues check the limit before the enqueue, so they take one
	// message more (measured: MaxLength 2 took 3). 0 sets no limit.
	MaxLength int
}

func (q Queue) args() amqp.Table {
	a := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(q.DeliveryLimit)}
	if q.DeadLetterExchange != "" {
		a["x-dead-letter-exchange"] = q.DeadLetterExchange
		a["x-dead-letter-strategy"] = "at-least-once"
	}
	if q.DeadLetterExchange != "" || q.MaxLength > 0 {
		a["x-overflow"] = "reject-publish"
	}
	if q.MaxLength > 0 {
		a["x-max-length"] = int64(q.MaxLength)
	}
	return a
}

// Declare declares t idempotently, route by route (exchange, queue,
// bindings), on a channel of its own (a refused declaration closes its
// channel). It stops at the first error, which names what was refused and,
// when it exists with other settings, is a *MismatchError (wrapping
// ErrTopologyMismatch).
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

// MismatchError is a declaration the broker refused because the exchange
// or queue exists with other settings (PRECONDITION_FAILED). Arg, Received
// and Current are read from the broker's reason when it names one
// argument ("inequivalent arg 'x-max-length' for queue 'q' in vhost '/':
// received the value '10' of type 'long' but current is none", RabbitMQ
// 3.10): Received is what this declaration asked for and Current what the
// existing one has, "" for none.
type MismatchError struct {
	// Kind is "exchange", "queue" or "binding of"; Name what was declared.
	Kind, Name string
	// Arg is the argument the broker named ("" when the reason names
	// none, e.g. a durable flag).
	Arg               string
	Received, Current string
	// Reason is the broker's text.
	Reason string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("declare %s %s: %v: %s", e.Kind, e.Name, ErrTopologyMismatch, e.Reason)
}

// Unwrap makes errors.Is(err, ErrTopologyMismatch) hold.
func (e *MismatchError) Unwrap() error { return ErrTopologyMismatch }

// inequivalentRE reads RabbitMQ's reason for an inequivalent argument.
var inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']+)' for \w+ '[^']*' in vhost '[^']*': received (.*) but current is (.*)$`)

// quotedRE is the first quoted token of "the value '10' of type 'long'" or
// "'20'"; "none" has none.
var quotedRE = regexp.MustCompile(`'([^']*)'`)

func argValue(s string) string {
	if m := quotedRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func declareError(what, name string, err error) error {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return fmt.Errorf("declare %s %s: %w", what, name, err)
	}
	me := &MismatchError{Kind: what, Name: name, Reason: ae.Reason}
	if m := inequivalentRE.FindStringSubmatch(ae.Reason); m != nil {
		me.Arg, me.Received, me.Current = m[1], argValue(m[2]), argValue(m[3])
	}
	return me
}
