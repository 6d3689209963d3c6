package broker

import (
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one message received by Channel.Consume, not yet
// acknowledged.
type Delivery struct {
	// Message holds the body, the properties and the headers as received;
	// Exchange and RoutingKey are those it was published with. Mandatory
	// is always false (the broker does not say).
	Message
	// Redelivered is set when the broker delivered it before.
	Redelivered bool
	// Tag is the delivery tag, valid for Ack on the Channel that received
	// it only.
	Tag uint64
	// Received is when this client took it from the library.
	Received time.Time
}

// Channel is a channel to consume on, opened by Conn.Channel. Closing it
// hands its unacknowledged deliveries back to the broker. Ack, Cancel and
// Close are safe for concurrent use.
type Channel struct {
	ch        *amqp.Channel
	closed    <-chan error
	cancelled <-chan string
	quit      chan struct{}
	closeOnce sync.Once
}

// Channel opens a channel for consuming.
func (c *Conn) Channel() (*Channel, error) {
	ch, err := c.c.Channel()
	if err != nil {
		return nil, fmt.Errorf("open consume channel: %w", err)
	}
	return &Channel{
		ch:        ch,
		closed:    closedErrors(ch.NotifyClose(make(chan *amqp.Error, 1))),
		cancelled: ch.NotifyCancel(make(chan string, 1)),
		quit:      make(chan struct{}),
	}, nil
}

// Qos sets the prefetch window: at most prefetch unacknowledged deliveries
// on this channel (basic.qos, per consumer).
func (c *Channel) Qos(prefetch int) error {
	if err := c.ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch %d: %w", prefetch, err)
	}
	return nil
}

// Consume starts consuming queue with manual acknowledgement under the
// consumer tag. The returned channel holds up to buffer deliveries, each
// stamped with its arrival (the library's own channel is unbuffered), and
// is closed when the broker's cancel-ok follows Cancel, when the channel
// closes, or on Close.
func (c *Channel) Consume(queue, tag string, buffer int) (<-chan Delivery, error) {
	in, err := c.ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	out := make(chan Delivery, buffer)
	go func() {
		defer close(out)
		for d := range in {
			select {
			case out <- delivery(d, time.Now()):
			case <-c.quit:
				return
			}
		}
	}()
	return out, nil
}

func delivery(d amqp.Delivery, at time.Time) Delivery {
	return Delivery{
		Message: Message{
			Exchange: d.Exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
			ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: fromTable(d.Headers),
			Body: d.Body, Persistent: d.DeliveryMode == amqp.Persistent,
		},
		Redelivered: d.Redelivered, Tag: d.DeliveryTag, Received: at,
	}
}

// Ack acknowledges the delivery tag, and with multiple every earlier
// unacknowledged tag of this channel too.
func (c *Channel) Ack(tag uint64, multiple bool) error { return c.ch.Ack(tag, multiple) }

// Cancel stops the consumer tag (basic.cancel): no delivery follows the
// broker's cancel-ok, after which the deliveries channel closes.
func (c *Channel) Cancel(tag string) error { return c.ch.Cancel(tag, false) }

// Closed receives the broker's reason when the broker closes the channel
// (a consumer acknowledgement timeout arrives as PRECONDITION_FAILED) and
// is closed without a value when the client closed it.
func (c *Channel) Closed() <-chan error { return c.closed }

// Cancelled receives the consumer tag when the broker cancels a consumer
// by itself (its queue was deleted or moved).
func (c *Channel) Cancelled() <-chan string { return c.cancelled }

// IsClosed reports whether the channel is closed.
func (c *Channel) IsClosed() bool { return c.ch.IsClosed() }

// Close closes the channel; the broker requeues its unacknowledged
// deliveries. Closing twice is harmless.
func (c *Channel) Close() error {
	c.closeOnce.Do(func() { close(c.quit) })
	return c.ch.Close()
}
