package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// fillDeadLetterQueue publishes to the dead-letter exchange until the
// broker refuses one (the queue's length limit), and returns how many it
// took.
func (b *bundle) fillDeadLetterQueue(t *testing.T) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		err := b.pub.Publish(b.ctx, broker.Message{Exchange: b.names.DeadLetterExchange, RoutingKey: "filler",
			MessageID: fmt.Sprintf("filler-%d", n), Body: []byte("filler"), Persistent: true, Mandatory: true})
		if err != nil {
			require.ErrorIs(t, err, broker.ErrNacked)
			return n
		}
	}
	t.Fatal("the dead-letter queue refused nothing")
	return 0
}

// histogram returns the sample count and sum of the histogram name.
func (r *running) histogram(t testing.TB, name string) (uint64, float64) {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// A full dead-letter queue refuses a poison message. The consumer holds
// it: not acked (it stays in the input queue, unacknowledged), not
// requeued in a loop, counted, retried with capped backoff, while the
// events behind it are recorded and acked. A stop gives it back to the
// queue; once the dead-letter queue has room, it is dead-lettered.
func TestFullDeadLetterQueueHoldsThePoison(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxDeadLetterQueueLength = 2
	b.cfg.RetryBackoff, b.cfg.HoldBackoffMax = 10*time.Millisecond, 100*time.Millisecond
	r := b.start(t)
	filled := b.fillDeadLetterQueue(t)
	require.Contains(t, []int{2, 3}, filled, "x-max-length 2 (RabbitMQ 3.10 takes one more)")

	b.publish(t, "order.confirmed", []byte(`not json`))
	held := time.Now()
	b.publish(t, "order.confirmed", confirmations(t, 1, 3)...)
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letters_held") == 1 }, waitFor, tick, "held")
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) == 3 }, waitFor, tick, "the events behind it are recorded")
	require.Eventually(t, func() bool { return r.consumed(t, "OrderConfirmed", "inserted") == 3 }, waitFor, tick, "and acked")
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letter_refusals_total") >= 6 }, waitFor, tick, "retried")
	elapsed := time.Since(held)
	refusals := r.metric(t, "mailsvc_dead_letter_refusals_total")
	// Each wait is at least half its ceiling (10, 20, 40, 80, then 100 ms):
	// a loop would refuse thousands of times.
	require.LessOrEqual(t, refusals, 1+5+elapsed.Seconds()/0.05, "backed off, no loop (%s)", elapsed)
	require.Equal(t, 0, r.consumed(t, "other", "dead_lettered"), "not acked")
	require.Equal(t, 0.0, r.metric(t, "mailsvc_events_dead_lettered_total", "reason", "malformed_json"))
	require.Equal(t, int64(1), r.c.ConnectionsForTest(), "no reconnect")
	require.Zero(t, r.c.RedeliveredForTest(), "never requeued")
	require.Zero(t, b.queueDepth(t, b.names.Queue), "held unacknowledged, not ready")

	// A stop gives it back to the queue: nothing is lost.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.c.Stop(ctx))
	// The broker requeues what a closed channel held as it processes the close.
	require.Eventually(t, func() bool { return b.queueDepth(t, b.names.Queue) == 1 }, waitFor, tick, "given back")
	require.Len(t, b.deadLetters(t), filled, "only the fillers")

	r2 := b.start(t)
	require.Eventually(t, func() bool { return r2.consumed(t, "other", "dead_lettered") == 1 }, waitFor, tick)
	require.Zero(t, r2.metric(t, "mailsvc_dead_letters_held"))
	got := b.deadLetters(t)
	require.Len(t, got, 1)
	require.Equal(t, "malformed_json", deadletter.Reason(got[0].Headers))
	require.Zero(t, b.queueDepth(t, b.names.Queue))
}

// Room in the dead-letter queue ends the hold without a restart.
func TestHeldDeadLetterGoesOutOnceThereIsRoom(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxDeadLetterQueueLength = 1
	b.cfg.RetryBackoff, b.cfg.HoldBackoffMax = 10*time.Millisecond, 50*time.Millisecond
	r := b.start(t)
	filled := b.fillDeadLetterQueue(t)
	b.publish(t, "order.confirmed", []byte(`{"event_type":`))
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letters_held") == 1 }, waitFor, tick)
	require.Equal(t, filled, b.queueDepth(t, b.names.DeadLetterQueue), "only the fillers")

	// Draining makes room, and the held letter may go out while the drain
	// still runs (its retry waits 10 to 50 ms): then the drain takes it too.
	drained := b.deadLetters(t)
	fillers := 0
	for _, d := range drained {
		if d.RoutingKey == "filler" {
			fillers++
		}
	}
	require.Equal(t, filled, fillers)
	require.LessOrEqual(t, len(drained)-fillers, 1)
	require.Eventually(t, func() bool { return r.consumed(t, "other", "dead_lettered") == 1 }, waitFor, tick)
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letters_held") == 0 }, waitFor, tick, "no longer held")
	require.GreaterOrEqual(t, r.metric(t, "mailsvc_dead_letter_refusals_total"), 1.0)
	require.Equal(t, 1.0, r.metric(t, "mailsvc_events_dead_lettered_total", "reason", "malformed_json"))
	require.Eventually(t, func() bool { return b.queueDepth(t, b.names.DeadLetterQueue)+len(drained)-fillers == 1 }, waitFor, tick)
	require.Zero(t, b.queueDepth(t, b.names.Queue))
	require.Equal(t, int64(1), r.c.ConnectionsForTest())
}

// The input queue is declared with amqp.max_queue_length: a producer's
// publish beyond it is nacked (back-pressure on the producer's outbox).
func TestInputQueueLimitNacksTheProducer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxQueueLength = 2
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, consumer.DeclareTopology(conn, b.cfg.WithDefaults()))
	var errs []error
	for i := range 4 {
		errs = append(errs, b.pub.Publish(b.ctx, broker.Message{Exchange: b.names.InputExchange, RoutingKey: "order.confirmed",
			Body: body(t, confirmedNow(fmt.Sprint(i))), Persistent: true, Mandatory: true}))
	}
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[3], broker.ErrNacked)
}

// A queue declared before the limits existed (or by hand) keeps its
// arguments: the consumer stops at once with an error that prints the
// policies to set, and runs once amqp.queue_limits is policy. The other
// way round, a queue with the limit as an argument refuses policy mode.
func TestTopologyOfAnEarlierVersionSaysWhatToRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.cfg.WithDefaults()
	old.LimitsByPolicy = true
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, consumer.DeclareTopology(conn, old), "the arguments an earlier mailsvc declared")

	cfg := b.cfg.WithDefaults()
	err := consumer.DeclareTopology(conn, cfg)
	require.ErrorIs(t, err, broker.ErrTopologyMismatch)
	for _, want := range []string{
		"inequivalent arg 'x-max-length'",
		fmt.Sprintf(`rabbitmqctl set_policy --vhost '/' --apply-to queues --priority 10 'mailsvc-limits-%s' '^%s$' '{"max-length":100000,"overflow":"reject-publish"}'`,
			b.names.DeadLetterQueue, escapeDots(b.names.DeadLetterQueue)),
		fmt.Sprintf(`rabbitmqctl set_policy --vhost '/' --apply-to queues --priority 10 'mailsvc-limits-%s' '^%s$' '{"max-length":300000,"overflow":"reject-publish"}'`,
			b.names.Queue, escapeDots(b.names.Queue)),
		"amqp.queue_limits: policy",
	} {
		require.ErrorContains(t, err, want)
	}

	c, err := consumer.New(b.cfg, consumer.Options{Store: b.store, Templates: b.tmpl})
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	select {
	case <-c.Done():
	case <-time.After(waitFor):
		t.Fatal("the consumer kept retrying a topology the broker refuses")
	}
	require.ErrorIs(t, c.Err(), broker.ErrTopologyMismatch)
	require.ErrorContains(t, c.Err(), "rabbitmqctl set_policy")

	b.cfg.LimitsByPolicy = true
	b.start(t)

	// A queue with the limit as an argument, and a config that leaves it to a policy.
	b2 := setup(t)
	require.NoError(t, consumer.DeclareTopology(conn, b2.cfg.WithDefaults()))
	pol := b2.cfg.WithDefaults()
	pol.LimitsByPolicy = true
	err = consumer.DeclareTopology(conn, pol)
	require.ErrorIs(t, err, broker.ErrTopologyMismatch)
	require.ErrorContains(t, err, "set amqp.queue_limits: arguments (and amqp.max_dead_letter_queue_length to match it)")
	changed := b2.cfg.WithDefaults()
	changed.MaxDeadLetterQueueLength = 5
	err = consumer.DeclareTopology(conn, changed)
	require.ErrorContains(t, err, "was declared with x-max-length=100000 and amqp.max_dead_letter_queue_length is 5")
}

// escapeDots is regexp.QuoteMeta for the test's queue names (dots only).
func escapeDots(s string) string {
	out := ""
	for _, r := range s {
		if r == '.' {
			out += `\`
		}
		out += string(r)
	}
	return out
}

// mailsvc_event_lag_seconds counts from occurred_at to the commit, once
// per event that wrote something: duplicates are not counted.
func TestEventLagIsObservedPerRecordedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	var bodies [][]byte
	for i := range 3 {
		ev := confirmedEvent(fmt.Sprint(500 + i))
		ev["occurred_at"] = time.Now().Add(-10 * time.Second).UTC().Format(time.RFC3339Nano)
		bodies = append(bodies, body(t, ev))
	}
	b.publish(t, "order.confirmed", append(bodies, bodies[0])...)
	r.waitConsumed(t, 4)
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "duplicate"))
	n, sum := r.histogram(t, "mailsvc_event_lag_seconds")
	require.EqualValues(t, 3, n)
	require.GreaterOrEqual(t, sum, 30.0)
	require.Less(t, sum, 3*(10+waitFor.Seconds()))
}
