package relay_test

import (
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// observer reads what reaches the events exchange through an exclusive
// queue (removed with its connection) bound with a routing pattern.
type observer struct {
	conn *amqp.Connection
	mu   sync.Mutex
	got  []amqp.Delivery
	done chan struct{}
}

// declareEvents declares the test's events exchange as the relay does.
func declareEvents(t *testing.T, ch *amqp.Channel, names *brokertest.Names) {
	t.Helper()
	require.NoError(t, ch.ExchangeDeclare(names.EventsExchange, "topic", true, false, false, false, nil))
}

// observe binds names.EventsQueue to the events exchange with pattern and
// collects every delivery until the test ends.
func observe(t *testing.T, names *brokertest.Names, pattern string) *observer {
	t.Helper()
	conn := brokertest.Dial(t)
	ch, err := conn.Channel()
	require.NoError(t, err)
	declareEvents(t, ch, names)
	q, err := ch.QueueDeclare(names.EventsQueue, false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, pattern, names.EventsExchange, false, nil))
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	o := &observer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for d := range msgs {
			o.mu.Lock()
			o.got = append(o.got, d)
			o.mu.Unlock()
		}
	}()
	t.Cleanup(o.close)
	return o
}

func (o *observer) close() {
	_ = o.conn.Close()
	<-o.done
}

// deliveries returns a copy of what arrived so far.
func (o *observer) deliveries() []amqp.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]amqp.Delivery(nil), o.got...)
}

// waitFor waits until at least n deliveries arrived and returns them all.
func (o *observer) waitFor(t *testing.T, n int) []amqp.Delivery {
	t.Helper()
	require.Eventually(t, func() bool { return len(o.deliveries()) >= n }, 20*time.Second, 10*time.Millisecond,
		"want %d deliveries, got %d", n, len(o.deliveries()))
	return o.deliveries()
}

// bindRejecting binds a queue that refuses every message (max length 0,
// overflow reject-publish), so the broker nacks what is routed to it. The
// queue is exclusive and goes with the returned connection, closed at the
// end of the test.
func bindRejecting(t *testing.T, names *brokertest.Names, pattern string) {
	t.Helper()
	conn := brokertest.Dial(t)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	declareEvents(t, ch, names)
	q, err := ch.QueueDeclare(names.Prefix+"rejecting", false, true, true, false,
		amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, pattern, names.EventsExchange, false, nil))
}
