package cli

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// serving is a `mailsvc serve` running in the test process.
type serving struct {
	cancel context.CancelFunc
	done   chan error
	logs   *syncWriter
}

// startServe runs `mailsvc serve` with config until stop.
func startServe(t *testing.T, config string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, done: make(chan error, 1), logs: &syncWriter{}}
	go func() {
		var out bytes.Buffer
		s.done <- Execute(ctx, []string{"--config", config, "serve"}, &out, s.logs)
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels serve and waits for it to return; safe to call twice.
func (s *serving) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		require.NoError(t, err, s.logs.String())
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop within a minute")
	}
}

// queueDepth returns the ready messages of queue, or -1 while it does not
// exist.
func queueDepth(t *testing.T, queue string) int {
	t.Helper()
	conn := brokertest.Dial(t)
	defer conn.Close()
	g, err := broker.NewGetter(conn)
	require.NoError(t, err)
	defer g.Close()
	n, err := g.Depth(queue)
	if errors.Is(err, broker.ErrNoQueue) {
		return -1
	}
	require.NoError(t, err)
	return n
}

// TestDLQReplayAfterAConfigFix runs the real consumer: an event over
// amqp.max_message_bytes and a malformed one are dead-lettered; after the
// limit is raised, a replay ends with the first recorded as a mail and the
// second back in the dead-letter queue, once per replay, never looping.
func TestDLQReplayAfterAConfigFix(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "amqp:\n  max_message_bytes: 300\nhttp:\n  addr: 127.0.0.1:0\n")
	fixed := writeOpsConfig(t, o.sc.URL, brokertest.URL(), o.names, "http:\n  addr: 127.0.0.1:0\n")

	strict := startServe(t, o.config)
	// The queue's bindings come last in the topology: emit until routable.
	require.Eventually(t, func() bool {
		_, err := o.run(t, "emit", "order-confirmed", "--order-id", "77")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "serve declares the topology")
	publish(t, broker.Message{Exchange: o.names.InputExchange, RoutingKey: "order.confirmed", MessageID: "bad-1",
		ContentType: "application/json", Body: []byte(`{"event_id": `), Persistent: true})
	// A producer that sets no message_id: its dead-letter copy must keep
	// it empty, or the replay would fail the message_id = event_id check.
	publish(t, broker.Message{Exchange: o.names.InputExchange, RoutingKey: "order.confirmed",
		ContentType: "application/json", Persistent: true, Body: []byte(`{"event_id":"0199a1f0-0000-7000-8000-000000000078",
		"event_type":"OrderConfirmed","version":1,"occurred_at":"` + time.Now().UTC().Format(time.RFC3339) + `",
		"dedupe_key":"order-confirmed:78","data":{"order_id":"78","email":"b@example.com","customer_name":"B",
		"locale":"vi","currency":"VND","total":"1000","items":[{"sku":"S","name":"N","quantity":1,"unit_price":"1000"}]}}`)})
	require.Eventually(t, func() bool { return queueDepth(t, o.names.DeadLetterQueue) == 3 }, 30*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 0, o.sc.QueryInt(t, `SELECT count(*) FROM mail`))
	strict.stop(t)

	startServe(t, fixed)
	out, err := o.run(t, "dlq", "replay", "--rate", "100")
	require.NoError(t, err)
	require.Contains(t, out, "reason=too_large")
	require.Contains(t, out, "reason=malformed_json")
	require.Contains(t, out, "replayed 3 of 3")
	require.Eventually(t, func() bool {
		return o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key IN ('order-confirmed:77', 'order-confirmed:78')`) == 2
	}, 30*time.Second, 50*time.Millisecond, "the fixed events are processed")
	require.Eventually(t, func() bool { return queueDepth(t, o.names.DeadLetterQueue) == 1 }, 30*time.Second, 50*time.Millisecond)

	// Still bad: each replay sends it once and it comes back once.
	out, err = o.run(t, "dlq", "replay", "--rate", "100")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 of 1")
	require.Eventually(t, func() bool { return queueDepth(t, o.names.DeadLetterQueue) == 1 }, 30*time.Second, 50*time.Millisecond)
	got := drain(t, o.names.DeadLetterQueue)
	require.Len(t, got, 1)
	require.Equal(t, "bad-1", got[0].MessageID)
	require.Equal(t, string(mailtype.ReasonMalformedJSON), deadletter.Reason(got[0].Headers))
	require.EqualValues(t, 2, got[0].Headers[deadletter.HeaderReplays])
	require.EqualValues(t, 2, o.sc.QueryInt(t, `SELECT count(*) FROM mail`))
}

// syncWriter is an io.Writer safe for concurrent use.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
