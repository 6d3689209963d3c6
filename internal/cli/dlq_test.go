package cli

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// dlqTopology declares, with the test's names: the input exchange and a
// queue bound to it (inputArgs are its arguments), the dead-letter
// exchange and queue, and an "expiring" path (EventsExchange ->
// EventsQueue with a TTL of 0 that dead-letters) through which RabbitMQ
// itself dead-letters a message and writes x-death.
func dlqTopology(t *testing.T, n *brokertest.Names, inputArgs map[string]any) {
	t.Helper()
	for _, x := range []string{n.InputExchange, n.DeadLetterExchange, n.EventsExchange} {
		brokertest.DeclareExchange(t, x)
	}
	brokertest.DeclareQueue(t, n.Queue, n.InputExchange, "order.*", inputArgs)
	brokertest.DeclareQueue(t, n.DeadLetterQueue, n.DeadLetterExchange, "#", nil)
	brokertest.DeclareQueue(t, n.EventsQueue, n.EventsExchange, "#", map[string]any{"x-message-ttl": int32(0), "x-dead-letter-exchange": n.DeadLetterExchange})
}

// publish publishes one message with confirm.
func publish(t *testing.T, m broker.Message) {
	t.Helper()
	conn := brokertest.Dial(t)
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, m))
}

// drain reads every message of queue (acking them).
func drain(t *testing.T, queue string) []*broker.Got {
	t.Helper()
	conn := brokertest.Dial(t)
	defer conn.Close()
	g, err := broker.NewGetter(conn)
	require.NoError(t, err)
	defer g.Close()
	var out []*broker.Got
	for {
		got, ok, err := g.Get(queue)
		require.NoError(t, err)
		if !ok {
			return out
		}
		require.NoError(t, got.Ack())
		out = append(out, got)
	}
}

// depth returns the ready messages of queue.
func depth(t *testing.T, queue string) int {
	t.Helper()
	conn := brokertest.Dial(t)
	defer conn.Close()
	g, err := broker.NewGetter(conn)
	require.NoError(t, err)
	defer g.Close()
	n, err := g.Depth(queue)
	require.NoError(t, err)
	return n
}

// seedDLQ dead-letters two messages: one the way the consumer does (its
// headers, published to the dead-letter exchange under another key), one
// the way RabbitMQ does (expired, with x-death).
func seedDLQ(t *testing.T, n *brokertest.Names) {
	t.Helper()
	publish(t, broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "poison", MessageID: "ev-1", Type: "OrderCancelled",
		ContentType: "application/json", Body: []byte(`{"n":1}`), Persistent: true,
		Headers: map[string]any{deadletter.HeaderOriginalRoutingKey: "order.cancelled", deadletter.HeaderErrorReason: "too_large",
			deadletter.HeaderErrorClass: "permanent", "x-producer": "orders"}})
	publish(t, broker.Message{Exchange: n.EventsExchange, RoutingKey: "order.confirmed", MessageID: "ev-2", Type: "OrderConfirmed",
		ContentType: "application/json", Body: []byte(`{"n":2}`), Persistent: true})
	require.Eventually(t, func() bool { return depth(t, n.DeadLetterQueue) == 2 }, 10*time.Second, 20*time.Millisecond)
}

func TestDLQReplayMovesMessagesBackWithTheirRoutingKey(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)
	seedDLQ(t, o.names)

	out, err := o.run(t, "dlq", "replay", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "would replay message_id=ev-1 type=OrderCancelled routing_key=order.cancelled reason=too_large")
	require.Contains(t, out, "would replay message_id=ev-2 type=OrderConfirmed routing_key=order.confirmed reason=expired")
	require.Contains(t, out, "would replay 2 of 2 dead-lettered messages")
	require.Equal(t, 2, depth(t, o.names.DeadLetterQueue), "a dry run changes nothing")
	require.Equal(t, 0, depth(t, o.names.Queue))

	start := time.Now()
	out, err = o.run(t, "dlq", "replay", "--rate", "10")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 2 of 2 dead-lettered messages to "+o.names.InputExchange)
	require.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond, "2 messages at 10/s take at least 0.1 s")
	require.Equal(t, 0, depth(t, o.names.DeadLetterQueue))

	got := drain(t, o.names.Queue)
	require.Len(t, got, 2)
	byID := map[string]*broker.Got{got[0].MessageID: got[0], got[1].MessageID: got[1]}
	ev1, ev2 := byID["ev-1"], byID["ev-2"]
	require.Equal(t, "order.cancelled", ev1.RoutingKey)
	require.Equal(t, `{"n":1}`, string(ev1.Body))
	require.Equal(t, "OrderCancelled", ev1.Type)
	require.Equal(t, "application/json", ev1.ContentType)
	require.True(t, ev1.Persistent)
	require.Equal(t, "orders", ev1.Headers["x-producer"], "foreign headers are kept")
	require.NotContains(t, ev1.Headers, deadletter.HeaderErrorReason)
	require.EqualValues(t, 1, ev1.Headers[deadletter.HeaderReplays])
	require.Equal(t, "order.confirmed", ev2.RoutingKey)
	require.NotContains(t, ev2.Headers, "x-death")
	require.NotContains(t, ev2.Headers, "x-first-death-reason")
}

func TestDLQReplayLimitAndEmptyQueue(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)
	seedDLQ(t, o.names)

	out, err := o.run(t, "dlq", "replay", "--limit", "1", "--rate", "1000")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 of 2")
	require.Equal(t, 1, depth(t, o.names.DeadLetterQueue))
	require.Equal(t, 1, depth(t, o.names.Queue))

	out, err = o.run(t, "dlq", "replay", "--rate", "1000")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 of 1")
	out, err = o.run(t, "dlq", "replay")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 0 of 0")
	require.Equal(t, 2, depth(t, o.names.Queue))

	_, err = o.run(t, "dlq", "replay", "--rate", "0")
	require.ErrorContains(t, err, "--rate must be > 0")
}

func TestDLQReplayOfAStillBadMessageDoesNotLoop(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	// Every message reaching the input queue is dead-lettered again at once,
	// like a poison message the consumer still rejects.
	dlqTopology(t, o.names, map[string]any{"x-message-ttl": int32(0), "x-dead-letter-exchange": o.names.DeadLetterExchange})
	seedDLQ(t, o.names)

	out, err := o.run(t, "dlq", "replay", "--rate", "1000")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 2 of 2", "one pass over what was there at start, then stop")
	require.Eventually(t, func() bool { return depth(t, o.names.DeadLetterQueue) == 2 }, 10*time.Second, 20*time.Millisecond,
		"both are back in the dead-letter queue, not dropped as a dead-letter cycle")
	got := drain(t, o.names.DeadLetterQueue)
	require.Len(t, got, 2)
	for _, g := range got {
		require.Equal(t, "expired", deadletter.Reason(g.Headers))
		require.EqualValues(t, 1, g.Headers[deadletter.HeaderReplays])
	}
}

func TestDLQReplayUnroutableLeavesTheMessage(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)
	publish(t, broker.Message{Exchange: o.names.DeadLetterExchange, RoutingKey: "x", MessageID: "ev-9", Body: []byte(`{}`),
		Headers: map[string]any{deadletter.HeaderOriginalRoutingKey: "nobody.listens"}})
	require.Eventually(t, func() bool { return depth(t, o.names.DeadLetterQueue) == 1 }, 10*time.Second, 20*time.Millisecond)

	out, err := o.run(t, "dlq", "replay")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "no queue is bound for that routing key")
	require.ErrorContains(t, err, "it stays in the dead-letter queue")
	require.Contains(t, out, "replayed 0 of 1")
	require.Equal(t, 1, depth(t, o.names.DeadLetterQueue))
}

func TestDLQReplayReportsMissingQueueAndBroker(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	_, err := o.run(t, "dlq", "replay")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.ErrorContains(t, err, "queue does not exist: "+o.names.DeadLetterQueue)

	cfg := writeOpsConfig(t, o.sc.URL, "amqp://guest:amqp-Secret-9@127.0.0.1:1/", o.names, "")
	_, err = runCLI(t, cfg, "dlq", "replay")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "check amqp.url")
	require.NotContains(t, err.Error(), "amqp-Secret-9")
}
