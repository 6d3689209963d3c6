package brokertest

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// withChannel runs f on a fresh channel of a fresh connection to the test
// broker, both closed afterwards.
func withChannel(t testing.TB, f func(ch *amqp.Channel) error) error {
	t.Helper()
	conn := DialRaw(t)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// DeclareExchange declares a durable topic exchange.
func DeclareExchange(t testing.TB, name string) {
	t.Helper()
	must(t, withChannel(t, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil)
	}))
}

// DeclareQueue declares a durable queue with args (queue arguments such as
// "x-message-ttl") and binds it to exchange, which must exist, with key.
func DeclareQueue(t testing.TB, queue, exchange, key string, args map[string]any) {
	t.Helper()
	must(t, withChannel(t, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table(args)); err != nil {
			return err
		}
		return ch.QueueBind(queue, key, exchange, false, nil)
	}))
}

// QueueState returns the ready messages and the consumers of queue, or an
// error when it does not exist.
func QueueState(t testing.TB, queue string) (messages, consumers int, err error) {
	t.Helper()
	err = withChannel(t, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		messages, consumers = q.Messages, q.Consumers
		return err
	})
	return messages, consumers, err
}

// Depth returns the ready messages of queue; a missing queue fails the
// test.
func Depth(t testing.TB, queue string) int {
	t.Helper()
	n, _, err := QueueState(t, queue)
	must(t, err)
	return n
}

// DeleteQueue deletes queue, messages and all.
func DeleteQueue(t testing.TB, queue string) {
	t.Helper()
	must(t, withChannel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(queue, false, false, false)
		return err
	}))
}

// PurgeQueue removes every ready message of queue.
func PurgeQueue(t testing.TB, queue string) {
	t.Helper()
	must(t, withChannel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueuePurge(queue, false)
		return err
	}))
}

// Drain takes (and acknowledges) every ready message of queue.
func Drain(t testing.TB, queue string) []broker.Delivery {
	t.Helper()
	var out []broker.Delivery
	must(t, withChannel(t, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil || !ok {
				return err
			}
			out = append(out, delivery(d))
		}
	}))
	return out
}

// delivery is d in broker's terms (top-level headers only).
func delivery(d amqp.Delivery) broker.Delivery {
	return broker.Delivery{
		Message: broker.Message{
			Exchange: d.Exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
			ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: map[string]any(d.Headers),
			Body: d.Body, Persistent: d.DeliveryMode == amqp.Persistent,
		},
		Redelivered: d.Redelivered, Tag: d.DeliveryTag, Received: time.Now(),
	}
}
