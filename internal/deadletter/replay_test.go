package deadletter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// replayTopology declares the input exchange with its queue bound to
// "order.*", and the dead-letter exchange with its queue bound to "#".
func replayTopology(t *testing.T, n *brokertest.Names) *broker.Conn {
	t.Helper()
	conn := brokertest.Dial(t)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.Declare(broker.Topology{
		{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}, BindingKeys: []string{"order.*"}},
		{Exchange: n.DeadLetterExchange, Queue: broker.Queue{Name: n.DeadLetterQueue, DeliveryLimit: deadletter.QueueDeliveryLimit},
			BindingKeys: []string{deadletter.BindingKey}},
	}))
	return conn
}

// deadLetter publishes messages to the dead-letter exchange with confirms.
func deadLetter(t *testing.T, conn *broker.Conn, msgs ...broker.Message) {
	t.Helper()
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range pub.PublishBatch(ctx, msgs) {
		require.NoError(t, err, "publish %d", i)
	}
}

func replay(t *testing.T, conn *broker.Conn, o deadletter.ReplayOptions) ([]deadletter.Handled, deadletter.Result, error) {
	t.Helper()
	var handled []deadletter.Handled
	o.Report = func(h deadletter.Handled) { handled = append(handled, h) }
	r, err := deadletter.NewReplayer(conn, o)
	require.NoError(t, err)
	defer r.Close()
	err = r.Run(context.Background())
	return handled, r.Result(), err
}

// A dry run lists and changes nothing; a replay moves what has an original
// routing key back to the input exchange and leaves the rest.
func TestReplayerDryRunThenReplay(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := replayTopology(t, n)
	deadLetter(t, conn,
		broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "order.confirmed", MessageID: "ev-1", Type: "OrderConfirmed",
			Body: []byte(`{"n":1}`), Persistent: true,
			Headers: map[string]any{deadletter.HeaderOriginalRoutingKey: "order.confirmed", deadletter.HeaderErrorReason: "too_large"}},
		broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "whatever", MessageID: "ev-2", Body: []byte(`{}`), Persistent: true})
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 2 }, 10*time.Second, 10*time.Millisecond)
	o := deadletter.ReplayOptions{Queue: n.DeadLetterQueue, Exchange: n.InputExchange, Rate: 1000}

	dry := o
	dry.DryRun = true
	handled, res, err := replay(t, conn, dry)
	require.NoError(t, err)
	require.Equal(t, deadletter.Result{Depth: 2, Replayed: 1, Skipped: 1}, res)
	require.Equal(t, []deadletter.Handled{
		{Action: deadletter.WouldReplay, Item: deadletter.Item{MessageID: "ev-1", Type: "OrderConfirmed", RoutingKey: "order.confirmed", Reason: "too_large"}},
		{Action: deadletter.Skipped, Item: deadletter.Item{MessageID: "ev-2"}},
	}, handled)
	require.Equal(t, "message_id=ev-1 type=OrderConfirmed routing_key=order.confirmed reason=too_large", handled[0].Item.String())
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 2 }, 10*time.Second, 10*time.Millisecond,
		"a dry run returns what it read")
	require.Equal(t, 0, brokertest.Depth(t, n.Queue))

	handled, res, err = replay(t, conn, o)
	require.NoError(t, err)
	require.Equal(t, deadletter.Result{Depth: 2, Replayed: 1, Skipped: 1}, res)
	require.Equal(t, deadletter.Replayed, handled[0].Action)
	got := brokertest.Drain(t, n.Queue)
	require.Len(t, got, 1)
	require.Equal(t, "ev-1", got[0].MessageID)
	require.Equal(t, "order.confirmed", got[0].RoutingKey)
	require.Equal(t, int64(1), got[0].Headers[deadletter.HeaderReplays])
	require.NotContains(t, got[0].Headers, deadletter.HeaderErrorReason)
	require.NotContains(t, got[0].Headers, deadletter.HeaderOriginalRoutingKey)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 1 }, 10*time.Second, 10*time.Millisecond,
		"the skipped one stays")
}

// A republish nobody routes leaves the message in the dead-letter queue
// and is a BrokerError that says so.
func TestReplayerUnroutableIsABrokerError(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := replayTopology(t, n)
	deadLetter(t, conn, broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "x", MessageID: "ev-9", Body: []byte(`{}`),
		Headers: map[string]any{deadletter.HeaderOriginalRoutingKey: "nobody.listens"}})
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 1 }, 10*time.Second, 10*time.Millisecond)
	handled, res, err := replay(t, conn, deadletter.ReplayOptions{Queue: n.DeadLetterQueue, Exchange: n.InputExchange, Rate: 1000})
	var be *deadletter.BrokerError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, err, broker.ErrReturned)
	require.ErrorContains(t, err, "it stays in the dead-letter queue")
	require.Empty(t, handled)
	require.Equal(t, deadletter.Result{Depth: 1}, res)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 1 }, 10*time.Second, 10*time.Millisecond)
}

func TestReplayerMissingQueue(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	_, err := deadletter.NewReplayer(conn, deadletter.ReplayOptions{Queue: n.DeadLetterQueue, Exchange: n.InputExchange, Rate: 1})
	require.ErrorIs(t, err, broker.ErrNoQueue)
	var be *deadletter.BrokerError
	require.False(t, errors.As(err, &be))
	_, err = deadletter.NewReplayer(conn, deadletter.ReplayOptions{Queue: n.DeadLetterQueue, Rate: 0})
	require.ErrorContains(t, err, "Rate must be > 0")
}
