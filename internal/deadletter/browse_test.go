package deadletter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// ids returns the message ids of entries, in order.
func ids(entries []deadletter.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.MessageID
	}
	return out
}

// Browsing leaves every message in place and in order, however often; a
// sweep removes exactly the messages it is told to and keeps the order of
// the rest.
func TestBrowseKeepsMessagesAndOrder(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	conn := replayTopology(t, n)
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	var msgs []broker.Message
	for i := 1; i <= 5; i++ {
		msgs = append(msgs, broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "order.confirmed", MessageID: fmt.Sprintf("ev-%d", i),
			Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Persistent: true, Headers: map[string]any{
				deadletter.HeaderOriginalRoutingKey: "order.confirmed", deadletter.HeaderErrorReason: []string{"too_large", "malformed_json"}[i%2],
				deadletter.HeaderDeadLetteredAt: at.Add(time.Duration(i) * time.Minute).Format(time.RFC3339Nano), deadletter.HeaderReplays: int64(i - 1)}})
	}
	deadLetter(t, conn, msgs...)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 5 }, 10*time.Second, 10*time.Millisecond)

	want := []string{"ev-1", "ev-2", "ev-3", "ev-4", "ev-5"}
	first, err := deadletter.Browse(conn, n.DeadLetterQueue)
	require.NoError(t, err)
	require.Equal(t, want, ids(first))
	e := first[2]
	require.Equal(t, 3, e.Position)
	require.Equal(t, "malformed_json", e.Reason)
	require.Equal(t, "order.confirmed", e.RoutingKey)
	require.Equal(t, at.Add(3*time.Minute), e.DeadLetteredAt)
	require.EqualValues(t, 2, e.Replays)
	require.Equal(t, `{"n":3}`, string(e.Body))
	require.Regexp(t, `^dl-[0-9a-f]{12}$`, e.ID)
	second, err := deadletter.Browse(conn, n.DeadLetterQueue)
	require.NoError(t, err)
	require.Equal(t, want, ids(second))
	for i := range first {
		require.Equal(t, first[i].ID, second[i].ID, "an id does not change with browsing")
	}

	depth, err := deadletter.Sweep(conn, n.DeadLetterQueue, func(e deadletter.Entry, remove func() error) error {
		if e.ID == first[2].ID {
			return remove()
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 5, depth, "messages read")
	left, err := deadletter.Browse(conn, n.DeadLetterQueue)
	require.NoError(t, err)
	require.Equal(t, []string{"ev-1", "ev-2", "ev-4", "ev-5"}, ids(left))

	f := deadletter.Filter{Reason: "too_large", OlderThan: time.Hour}
	var matched []string
	for _, e := range left {
		if f.Match(e, at.Add(62*time.Minute+30*time.Second)) {
			matched = append(matched, e.MessageID)
		}
	}
	require.Equal(t, []string{"ev-2"}, matched, "ev-4 too_large but dead-lettered less than an hour before")
	require.Equal(t, "reason=too_large older_than=1h0m0s", f.String())
}
