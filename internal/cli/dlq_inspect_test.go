package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// Real poison messages, dead-lettered by the real consumer, are listed
// and shown without leaving the queue, skipped one by id (with an audit
// row keeping the body) or by a confirmed filter, and replayed by reason
// only; nothing else moves, and the order stays.
func TestDLQInspectSkipAndFilteredReplay(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "amqp:\n  max_message_bytes: 300\nhttp:\n  addr: 127.0.0.1:0\n")
	strict := startServe(t, o.config)
	require.Eventually(t, func() bool {
		_, err := o.run(t, "emit", "order-confirmed", "--order-id", "77")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "serve declares the topology")
	for _, id := range []string{"bad-1", "bad-2"} {
		publish(t, broker.Message{Exchange: o.names.InputExchange, RoutingKey: "order.confirmed", MessageID: id,
			ContentType: "application/json", Body: []byte(`{"event_id": ` + id), Persistent: true})
	}
	require.Eventually(t, func() bool { return queueDepth(t, o.names.DeadLetterQueue) == 3 }, 30*time.Second, 50*time.Millisecond)
	strict.stop(t)

	out, err := o.run(t, "dlq", "list")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	require.Regexp(t, `^1 +dl-[0-9a-f]{12} +\S+ +too_large +order\.confirmed +1 +\d+s +"\{`, lines[1])
	require.Regexp(t, `^2 +dl-[0-9a-f]{12} +bad-1 +malformed_json +order\.confirmed +1 +\d+s +"\{\\"event_id\\": bad-1"$`, lines[2])
	require.Regexp(t, `^3 +dl-[0-9a-f]{12} +bad-2 +malformed_json`, lines[3])
	require.Equal(t, "3 of 3 dead-lettered messages shown; all are still in the queue", lines[4])
	require.Equal(t, 3, queueDepth(t, o.names.DeadLetterQueue))

	out, err = o.run(t, "dlq", "list", "--reason", "malformed_json", "--json")
	require.NoError(t, err)
	var listed []jsonEntry
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	require.Equal(t, "bad-1", listed[0].MessageID)
	require.Equal(t, `{"event_id": bad-1`, listed[0].Body)
	require.Equal(t, "bad-2", listed[1].MessageID)

	out, err = o.run(t, "dlq", "show", listed[1].ID)
	require.NoError(t, err)
	require.Regexp(t, `message_id: +bad-2\n`, out)
	require.Regexp(t, `reason: +malformed_json\n`, out)
	require.Contains(t, out, "--- body (18 bytes) ---\n{\"event_id\": bad-2\n")

	_, err = o.run(t, "dlq", "skip", "bad-1")
	require.Equal(t, ExitInvalid, ExitCode(err))
	out, err = o.run(t, "dlq", "skip", "bad-1", "--reason", "junk from a test producer")
	require.NoError(t, err)
	require.Equal(t, "removed for good dead letter "+listed[0].ID+` (message_id=bad-1 routing_key=order.confirmed reason=malformed_json); `+
		`its body, 18 bytes: "{\"event_id\": bad-1"`+"\n", out)
	require.Equal(t, 2, queueDepth(t, o.names.DeadLetterQueue))
	_, err = o.run(t, "dlq", "skip", "bad-1", "--reason", "again")
	require.Equal(t, ExitNotFound, ExitCode(err))

	_, err = o.run(t, "dlq", "skip", "--error-reason", "malformed_json", "--reason", "INC-9")
	require.Equal(t, ExitRefused, ExitCode(err))
	require.ErrorContains(t, err, "1 dead-lettered messages match reason=malformed_json; nothing was removed: add --confirm")
	require.Equal(t, 2, queueDepth(t, o.names.DeadLetterQueue))

	out, err = o.run(t, "dlq", "replay", "--error-reason", "too_large", "--rate", "100", "--reason", "limit raised")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 of 2 dead-lettered messages to "+o.names.InputExchange+"; 1 not matching the filter")
	require.Equal(t, 1, queueDepth(t, o.names.DeadLetterQueue))
	require.Equal(t, 1, queueDepth(t, o.names.Queue), "the too large event is back in the input queue")

	out, err = o.run(t, "dlq", "skip", "--error-reason", "malformed_json", "--reason", "INC-9", "--confirm")
	require.NoError(t, err)
	require.Contains(t, out, "removed 1 dead-lettered messages matching reason=malformed_json for good")
	require.Equal(t, 0, queueDepth(t, o.names.DeadLetterQueue))

	require.Equal(t, map[string]string{
		"dlq-skip bad-1":           `done removed for good dead letter ` + listed[0].ID + ` (message_id=bad-1 routing_key=order.confirmed reason=malformed_json); its body, 18 bytes: "{\"event_id\": bad-1"`,
		"dlq-skip " + listed[1].ID: `done removed for good dead letter ` + listed[1].ID + ` (message_id=bad-2 routing_key=order.confirmed reason=malformed_json); its body, 18 bytes: "{\"event_id\": bad-2"`,
		"dlq-replay":               "done replayed 1 of 2 dead-lettered messages to " + o.names.InputExchange + "; 1 not matching the filter (left in " + o.names.DeadLetterQueue + ", in order)",
	}, o.sc.QueryMap(t, `SELECT action || coalesce(' ' || substring(target from 'dead letter (\S+)'), ''), result || ' ' || detail FROM audit_log WHERE result = 'done'`))
}
