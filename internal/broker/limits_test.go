package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// A bounded queue pushes back on its producers: once it holds MaxLength
// ready messages (RabbitMQ 3.10's quorum queues take one more), the broker
// nacks the next publish and stores nothing of it.
func TestPublishBeyondTheLimitIsNacked(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	const limit = 3
	require.NoError(t, conn.Declare(broker.Topology{{Exchange: n.InputExchange, BindingKeys: []string{"#"},
		Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5, DeadLetterExchange: n.DeadLetterExchange, MaxLength: limit}}}))
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var results []error
	for range limit + 2 {
		results = append(results, pub.Publish(ctx, broker.Message{Exchange: n.InputExchange, RoutingKey: "order.confirmed",
			Body: []byte(`{}`), Mandatory: true, Persistent: true}))
	}
	for i := range limit {
		require.NoError(t, results[i], "publish %d is within the limit", i+1)
	}
	require.ErrorIs(t, results[limit+1], broker.ErrNacked, "the publish past the limit is refused")
	accepted := 0
	for _, err := range results {
		if err == nil {
			accepted++
		}
	}
	st, err := conn.InspectQueue(n.Queue)
	require.NoError(t, err)
	require.Equal(t, accepted, st.Ready, "a nacked publish is stored nowhere")
	require.Contains(t, []int{limit, limit + 1}, st.Ready)
	require.Equal(t, -1, st.Unacked, "AMQP cannot tell")
	require.Zero(t, st.Consumers)
}

// Declaring a queue again with a length limit it was not created with is
// refused by the broker, and the error names the argument and both values.
func TestDeclareMismatchNamesTheArgument(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	route := broker.Route{Exchange: n.InputExchange, BindingKeys: []string{"#"},
		Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5, DeadLetterExchange: n.DeadLetterExchange}}
	require.NoError(t, conn.Declare(broker.Topology{route}))

	route.Queue.MaxLength = 10
	err := conn.Declare(broker.Topology{route})
	require.ErrorIs(t, err, broker.ErrTopologyMismatch)
	var me *broker.MismatchError
	require.True(t, errors.As(err, &me))
	require.Equal(t, broker.MismatchError{Kind: "queue", Name: n.Queue, Arg: "x-max-length", Received: "10", Current: "", Reason: me.Reason}, *me)
	require.Contains(t, me.Reason, "PRECONDITION_FAILED")

	brokertest.DeleteQueue(t, n.Queue)
	require.NoError(t, conn.Declare(broker.Topology{route}))
	route.Queue.MaxLength = 20
	err = conn.Declare(broker.Topology{route})
	require.True(t, errors.As(err, &me))
	require.Equal(t, [3]string{"x-max-length", "20", "10"}, [3]string{me.Arg, me.Received, me.Current})
	route.Queue.MaxLength = 0
	err = conn.Declare(broker.Topology{route})
	require.True(t, errors.As(err, &me))
	require.Equal(t, [3]string{"x-max-length", "", "10"}, [3]string{me.Arg, me.Received, me.Current})
}

// A session that meets a topology mismatch ends Supervise with it: no
// reconnect can change a queue's arguments.
func TestSuperviseStopsOnATopologyMismatch(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	q := broker.Queue{Name: n.Queue, DeliveryLimit: 5}
	require.NoError(t, conn.Declare(broker.Topology{{Exchange: n.InputExchange, Queue: q}}))
	q.MaxLength = 7
	sessions := 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := broker.Supervise(ctx, broker.Config{URL: brokertest.URL(), Backoff: time.Millisecond}, discard(), nil,
		func(_ context.Context, c *broker.Conn, _ func()) error {
			sessions++
			return c.Declare(broker.Topology{{Exchange: n.InputExchange, Queue: q}})
		})
	require.ErrorIs(t, err, broker.ErrTopologyMismatch)
	require.Equal(t, 1, sessions)
	require.NoError(t, ctx.Err())
}

// A missing queue is ErrNoQueue, and the connection stays usable.
func TestInspectQueue(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	_, err := conn.InspectQueue(n.Queue)
	require.ErrorIs(t, err, broker.ErrNoQueue)
	require.NoError(t, conn.Declare(broker.Topology{{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}}}))
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.Consume(n.Queue, "inspect-test", 1)
	require.NoError(t, err)
	st, err := conn.InspectQueue(n.Queue)
	require.NoError(t, err)
	require.Equal(t, broker.QueueState{Ready: 0, Unacked: -1, Consumers: 1}, st)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
