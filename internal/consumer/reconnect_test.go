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

// The reconnect backoff starts again from its first step once a session
// consumes, however short it was: after several outages in a row the
// consumer meets the broker's return within the shortest delays, not
// after the longest (it took up to 28 s when only a long session reset
// the backoff). Each outage lasts three failed reconnects, enough to grow
// the backoff to 1-2 s (production defaults: 500 ms doubling to 30 s).
func TestBrokerReturnIsMetPromptlyAfterRepeatedOutages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	px := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	b.cfg.URL = px.RewriteURL(t, brokertest.URL())
	b.cfg.ReconnectBackoff, b.cfg.ReconnectBackoffMax = 500*time.Millisecond, 30*time.Second
	r := b.start(t)
	const cuts, bound = 4, 5 * time.Second
	took := make([]time.Duration, 0, cuts)
	for cut := 1; cut <= cuts; cut++ {
		before := len(b.logs.matching(reconnectingLog))
		px.Cut()
		require.Eventually(t, func() bool { return len(b.logs.matching(reconnectingLog)) >= before+3 }, waitFor, tick, "cut %d: three failures", cut)
		outage := b.logs.matching(reconnectingLog)[before:]
		require.Equal(t, "1", outage[0].attrs["failures"], "cut %d: the backoff starts again from its first step", cut)
		order := fmt.Sprint(800 + cut)
		b.publish(t, "order.confirmed", body(t, confirmedNow(order))) // straight to the broker, not through the proxy
		px.Restore(t)
		restored := time.Now()
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM mail WHERE order_id = $1`, order) == 1
		}, bound, tick, "cut %d: consuming again within %s of the broker's return", cut, bound)
		took = append(took, time.Since(restored).Round(time.Millisecond))
		// The next cut waits for this event's ack: a cut between the
		// commit and the ack would redeliver it, and the metric counts
		// acked deliveries.
		require.Eventually(t, func() bool { return r.consumed(t, "OrderConfirmed", "inserted") == cut }, waitFor, tick, "cut %d: the event acked", cut)
	}
	t.Logf("from the broker's return to the event's row, cut by cut: %v", took)
	// An ack the client wrote may still be lost in the next cut: the
	// broker redelivers that event, counted as a duplicate, never a
	// second row.
	require.Equal(t, cuts, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, r.consumedTotal(t)-cuts, r.consumed(t, "OrderConfirmed", "duplicate"), "anything else consumed is a redelivery")
	require.EqualValues(t, cuts, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(cuts+1), r.c.SessionsForTest())
	require.Empty(t, b.deadLetters(t))
}
