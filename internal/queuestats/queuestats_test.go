package queuestats_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/queuestats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The relay leader reads the broker's counts: 3 messages published to the
// input queue, one of them delivered to a consumer that has not acked it,
// and 1 in the dead-letter queue. AMQP cannot tell unacked deliveries, so
// no unacked series exists. A replica that does not lead exports nothing.
func TestLeaderReadsTheQueues(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, conn.Declare(broker.Topology{
		{Exchange: n.DeadLetterExchange, Queue: broker.Queue{Name: n.DeadLetterQueue, DeliveryLimit: 5}, BindingKeys: []string{"#"}},
		{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}, BindingKeys: []string{"#"}},
	}))
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ex := range []string{n.InputExchange, n.InputExchange, n.InputExchange, n.DeadLetterExchange} {
		require.NoError(t, pub.Publish(ctx, broker.Message{Exchange: ex, RoutingKey: "k", Body: []byte("x"), Mandatory: true, Persistent: true}))
	}
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Qos(1))
	in, err := ch.Consume(n.Queue, "queuestats-test", 1)
	require.NoError(t, err)
	<-in // held, not acked

	reg := prometheus.NewRegistry()
	m := queuestats.NewMetrics(reg)
	var leading atomic.Bool
	leading.Store(true)
	r := queuestats.New(queuestats.Config{AMQP: broker.Config{URL: brokertest.URL()}, Input: n.Queue, DeadLetter: n.DeadLetterQueue,
		InputMaxLength: 300, DeadLetterMaxLength: 100, Interval: 50 * time.Millisecond}, m, slog.New(slog.DiscardHandler), leading.Load)
	require.NoError(t, r.Start(context.Background()))
	require.Eventually(t, func() bool {
		return testutil.CollectAndCount(m.Messages) == 2 && testutil.ToFloat64(m.Messages.WithLabelValues("input", "ready")) == 2
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Messages.WithLabelValues("dead_letter", "ready")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Consumers.WithLabelValues("input")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.Consumers.WithLabelValues("dead_letter")))
	require.Equal(t, 2, testutil.CollectAndCount(m.Messages), "ready only: no unacked series without the management API")
	require.Zero(t, testutil.ToFloat64(m.Errors))
	require.Equal(t, 300.0, testutil.ToFloat64(m.MaxMessages.WithLabelValues("input")))
	require.Equal(t, 100.0, testutil.ToFloat64(m.MaxMessages.WithLabelValues("dead_letter")))

	leading.Store(false)
	require.Eventually(t, func() bool {
		return testutil.CollectAndCount(m.Messages)+testutil.CollectAndCount(m.Consumers)+testutil.CollectAndCount(m.MaxMessages) == 0
	},
		30*time.Second, 10*time.Millisecond, "a standby exports no queue series")
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	require.NoError(t, r.Stop(stopCtx))
}

// A queue that cannot be read loses its series and counts an error.
func TestMissingQueueHasNoSeries(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, conn.Declare(broker.Topology{{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}}}))
	reg := prometheus.NewRegistry()
	m := queuestats.NewMetrics(reg)
	r := queuestats.New(queuestats.Config{AMQP: broker.Config{URL: brokertest.URL()}, Input: n.Queue, DeadLetter: n.DeadLetterQueue},
		m, slog.New(slog.DiscardHandler), func() bool { return true }) // one read within the default 10 s
	require.NoError(t, r.Start(context.Background()))
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Errors) >= 1 }, 20*time.Second, 10*time.Millisecond,
		"the dead-letter queue does not exist")
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(stopCtx))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Errors), "one read in the first refresh")
	require.Equal(t, 1, testutil.CollectAndCount(m.Messages), "input ready only")
	require.Equal(t, 0.0, testutil.ToFloat64(m.Messages.WithLabelValues("input", "ready")))
}

// With the management API every number comes from it, unacked included.
func TestManagementGivesUnacked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.EscapedPath() {
		case "/api/queues/%2F/in":
			_, _ = w.Write([]byte(`{"messages_ready":40,"messages_unacknowledged":200,"consumers":2}`))
		case "/api/queues/%2F/dlq":
			_, _ = w.Write([]byte(`{"messages_ready":3,"messages_unacknowledged":0,"consumers":0}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	m := queuestats.NewMetrics(reg)
	r := queuestats.New(queuestats.Config{Input: "in", DeadLetter: "dlq",
		Management: &broker.Management{BaseURL: srv.URL, Client: srv.Client()}}, m, slog.New(slog.DiscardHandler), func() bool { return true })
	r.Refresh(context.Background())
	for labels, want := range map[[2]string]float64{
		{"input", "ready"}: 40, {"input", "unacked"}: 200, {"dead_letter", "ready"}: 3, {"dead_letter", "unacked"}: 0,
	} {
		require.Equal(t, want, testutil.ToFloat64(m.Messages.WithLabelValues(labels[0], labels[1])), labels)
	}
	require.Equal(t, 2.0, testutil.ToFloat64(m.Consumers.WithLabelValues("input")))
	require.Zero(t, testutil.ToFloat64(m.Errors))
}
