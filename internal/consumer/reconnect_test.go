package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// reconnectingLog is what broker.Supervise logs each time a connection is
// lost or a reconnect fails, with the number of failures in a row.
const reconnectingLog = "broker connection lost, reconnecting"

// With the default reconnect backoff (broker.DefaultBackoff doubling to
// broker.DefaultBackoffMax, 500 ms to 2 s, as the daemon's defaults), the
// consumer consumes again within 5 s of the broker's return, every time,
// however long the outage (issue 30: with a 30 s max, 0.6, 2.0 and 13.4 s
// after three 10 s cuts, 10.3 s after a 45 s cut). The backoff also starts
// again from its first step once a connection consumes. Three outages last
// four failed reconnects each (2-4 s; the backoff reaches its 2 s cap),
// the fourth eight (6-11 s), several at the cap; each time the broker returns just as a
// wait at the cap begins. Measured from the proxy's restore to the
// event's row.
func TestBrokerReturnIsMetPromptlyAfterRepeatedOutages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	px := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	b.cfg.URL = px.RewriteURL(t, brokertest.URL())
	b.cfg.ReconnectBackoff, b.cfg.ReconnectBackoffMax = 0, 0 // the defaults
	r := b.start(t)
	const bound = 5 * time.Second
	failuresPerCut := []int{4, 4, 4, 8}
	cuts := len(failuresPerCut)
	took := make([]time.Duration, 0, cuts)
	for cut := 1; cut <= cuts; cut++ {
		before := len(b.logs.matching(reconnectingLog))
		px.Cut()
		cutAt := time.Now()
		n := failuresPerCut[cut-1]
		require.Eventually(t, func() bool { return len(b.logs.matching(reconnectingLog)) >= before+n }, 30*time.Second, tick, "cut %d: %d failures", cut, n)
		outage := b.logs.matching(reconnectingLog)[before:]
		require.Equal(t, "1", outage[0].attrs["failures"], "cut %d: the backoff starts again from its first step", cut)
		for _, l := range outage[2:] {
			d, err := time.ParseDuration(l.attrs["retry_in"])
			require.NoError(t, err)
			require.True(t, d >= time.Second && d <= 2*time.Second, "cut %d: from the third failure on, a wait at the 2 s cap (jittered 1-2 s), got %s", cut, d)
		}
		order := fmt.Sprint(800 + cut)
		b.publish(t, "order.confirmed", body(t, confirmedNow(order))) // straight to the broker, not through the proxy
		px.Restore(t)
		restored := time.Now()
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM mail WHERE order_id = $1`, order) == 1
		}, bound, tick, "cut %d: consuming again within %s of the broker's return", cut, bound)
		took = append(took, time.Since(restored).Round(time.Millisecond))
		t.Logf("cut %d: %s long, consuming again %s after the broker's return", cut, restored.Sub(cutAt).Round(time.Millisecond), took[cut-1])
		// The next cut waits for this event's ack: a cut between the
		// commit and the ack would redeliver it, and the metric counts
		// acked deliveries.
		require.Eventually(t, func() bool { return r.consumed(t, "OrderConfirmed", "inserted") == cut }, waitFor, tick, "cut %d: the event acked", cut)
	}
	t.Logf("from the broker's return to the event's row, cut by cut: %v", took)
	for i, d := range took {
		require.LessOrEqual(t, d, bound, "cut %d", i+1)
	}
	// An ack the client wrote may still be lost in the next cut: the
	// broker redelivers that event, counted as a duplicate, never a
	// second row.
	require.Equal(t, cuts, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, r.consumedTotal(t)-cuts, r.consumed(t, "OrderConfirmed", "duplicate"), "anything else consumed is a redelivery")
	require.EqualValues(t, cuts, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(cuts+1), r.c.ConnectionsForTest())
	require.Empty(t, b.deadLetters(t))
}
