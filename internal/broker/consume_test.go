package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// A delivery comes in broker's terms, nested header tables (an x-death
// entry) as plain maps, and goes out again unchanged when republished.
func TestConsumeAndRepublishKeepNestedHeaders(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, conn.Declare(broker.Topology{
		{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}, BindingKeys: []string{"a.*"}},
		{Exchange: n.EventsExchange, Queue: broker.Queue{Name: n.EventsQueue, DeliveryLimit: 5}, BindingKeys: []string{"#"}},
	}))
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	death := map[string]any{"reason": "expired", "routing-keys": []any{"a.b"}, "count": int64(1)}
	headers := map[string]any{"x-death": []any{death}, "nested": map[string]any{"k": "v"}}
	require.NoError(t, pub.Publish(ctx, broker.Message{Exchange: n.InputExchange, RoutingKey: "a.b", MessageID: "m1",
		Type: "T", ContentType: "application/json", Headers: headers, Body: []byte(`{}`), Mandatory: true, Persistent: true}))

	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Qos(10))
	in, err := ch.Consume(n.Queue, "broker-test", 10)
	require.NoError(t, err)
	var d broker.Delivery
	select {
	case d = <-in:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	require.Equal(t, "m1", d.MessageID)
	require.Equal(t, "a.b", d.RoutingKey)
	require.Equal(t, n.InputExchange, d.Exchange)
	require.True(t, d.Persistent)
	require.False(t, d.Redelivered)
	require.False(t, d.Received.IsZero())
	require.Equal(t, []any{death}, d.Headers["x-death"])
	require.Equal(t, map[string]any{"k": "v"}, d.Headers["nested"])

	m := d.Message
	m.Exchange, m.Mandatory = n.EventsExchange, true
	require.NoError(t, pub.Publish(ctx, m))
	require.NoError(t, ch.Ack(d.Tag, false))
	require.NoError(t, ch.Cancel("broker-test"))
	_, open := <-in
	require.False(t, open, "the deliveries channel closes after the cancel")
	require.Equal(t, 0, brokertest.Depth(t, n.Queue), "acked")
	got := brokertest.Drain(t, n.EventsQueue)
	require.Len(t, got, 1)
	require.Equal(t, "m1", got[0].MessageID)
	require.Len(t, got[0].Headers["x-death"], 1)
}

// Declaring the same topology twice is fine; a queue declared again with
// other settings is ErrTopologyMismatch.
func TestDeclareIsIdempotentAndNamesAMismatch(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	topo := broker.Topology{{Exchange: n.InputExchange, BindingKeys: []string{"#"},
		Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 3, DeadLetterExchange: n.DeadLetterExchange}}}
	require.NoError(t, conn.Declare(topo))
	require.NoError(t, conn.Declare(topo))
	topo[0].Queue.DeliveryLimit = 4
	err := conn.Declare(topo)
	require.ErrorIs(t, err, broker.ErrTopologyMismatch)
	require.ErrorContains(t, err, "declare queue "+n.Queue)
}

// Deleting the queue under a consumer is the broker's cancel.
func TestChannelReportsTheBrokersCancel(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, conn.Declare(broker.Topology{{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 1}}}))
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.Consume(n.Queue, "cancel-test", 1)
	require.NoError(t, err)
	brokertest.DeleteQueue(t, n.Queue)
	select {
	case tag := <-ch.Cancelled():
		require.Equal(t, "cancel-test", tag)
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel")
	}
	require.NoError(t, ch.Close())
	_, open := <-ch.Closed()
	require.False(t, open, "a client close carries no reason")
	require.True(t, ch.IsClosed())
}
