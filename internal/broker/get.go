package broker

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNoQueue is returned by Getter.Depth when the queue does not exist.
var ErrNoQueue = errors.New("queue does not exist")

// Getter reads messages one at a time with basic.get and manual
// acknowledgement, for `mailsvc dlq replay`. Every message it returns is
// unacknowledged until Ack or Requeue; Close requeues the rest. It is not
// safe for concurrent use.
type Getter struct {
	ch *amqp.Channel
}

// Got is one message read by a Getter, not yet acknowledged.
type Got struct {
	// Message holds the body, the properties and the headers as received;
	// Exchange and RoutingKey are those of the last publish (for a
	// dead-lettered message: the dead-letter exchange).
	Message
	// Redelivered is set when the broker delivered it before.
	Redelivered bool
	// Remaining is how many messages were left in the queue after this one.
	Remaining int
	d         amqp.Delivery
}

// Ack removes the message from its queue.
func (g *Got) Ack() error { return g.d.Ack(false) }

// Requeue returns the message to its queue.
func (g *Got) Requeue() error { return g.d.Nack(false, true) }

// NewGetter opens a channel on conn.
func NewGetter(conn *Conn) (*Getter, error) {
	ch, err := conn.c.Channel()
	if err != nil {
		return nil, fmt.Errorf("open get channel: %w", err)
	}
	return &Getter{ch: ch}, nil
}

// Close closes the channel; the broker requeues every message read and
// not acknowledged.
func (g *Getter) Close() error { return g.ch.Close() }

// Depth returns the number of ready messages in queue. A missing queue
// gives ErrNoQueue and closes the channel (the broker's 404), so the
// Getter is unusable afterwards.
func (g *Getter) Depth(queue string) (int, error) {
	q, err := g.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, fmt.Errorf("%w: %s", ErrNoQueue, queue)
		}
		return 0, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return q.Messages, nil
}

// Get reads the next message of queue without acknowledging it; ok is
// false when the queue is empty.
func (g *Getter) Get(queue string) (got *Got, ok bool, err error) {
	d, ok, err := g.ch.Get(queue, false)
	if err != nil {
		return nil, false, fmt.Errorf("get from %s: %w", queue, err)
	}
	if !ok {
		return nil, false, nil
	}
	return &Got{
		Message: Message{
			Exchange: d.Exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
			ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: fromTable(d.Headers),
			Body: d.Body, Persistent: d.DeliveryMode == amqp.Persistent,
		},
		Redelivered: d.Redelivered, Remaining: int(d.MessageCount), d: d,
	}, true, nil
}
