package brokertest

import (
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// Observer reads what reaches an exchange through an exclusive queue
// (removed with its connection when the test ends) bound with a routing
// pattern.
type Observer struct {
	conn *amqp.Connection
	mu   sync.Mutex
	got  []broker.Delivery
	done chan struct{}
}

// Observe declares exchange (durable topic), binds queue (exclusive) to it
// with pattern and collects every message that arrives until the test
// ends.
func Observe(t testing.TB, exchange, queue, pattern string) *Observer {
	t.Helper()
	conn := DialRaw(t)
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	q, err := ch.QueueDeclare(queue, false, true, true, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q.Name, pattern, exchange, false, nil))
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	must(t, err)
	o := &Observer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for d := range msgs {
			o.mu.Lock()
			o.got = append(o.got, delivery(d))
			o.mu.Unlock()
		}
	}()
	t.Cleanup(o.close)
	return o
}

func (o *Observer) close() {
	_ = o.conn.Close()
	<-o.done
}

// Messages returns a copy of what arrived so far.
func (o *Observer) Messages() []broker.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]broker.Delivery(nil), o.got...)
}

// WaitFor waits up to 20 s until at least n messages arrived and returns
// them all; it fails the test when fewer arrive.
func (o *Observer) WaitFor(t testing.TB, n int) []broker.Delivery {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if got := o.Messages(); len(got) >= n {
			return got
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("want %d messages, got %d", n, len(o.Messages()))
		}
	}
}

// BindRejecting declares exchange (durable topic) and binds to it with
// pattern a queue that refuses every message (max length 0, overflow
// reject-publish), so the broker nacks what is routed to it. The queue is
// exclusive and goes with its connection, closed when the test ends.
func BindRejecting(t testing.TB, exchange, queue, pattern string) {
	t.Helper()
	conn := DialRaw(t)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	q, err := ch.QueueDeclare(queue, false, true, true, false,
		amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	must(t, err)
	must(t, ch.QueueBind(q.Name, pattern, exchange, false, nil))
}
