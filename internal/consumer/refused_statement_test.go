package consumer_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// The pgx query exec modes a connection pooler needs (database.url's
// default_query_exec_mode) send no parameter types: valid events must be
// recorded exactly as in the default mode, cancels above all.
func TestValidEventsInPoolerExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.store = b.sc.OpenInMode(t, mode)
			r := b.start(t)
			b.publish(t, "order.confirmed", body(t, confirmedNow("601")), body(t, confirmedNow("602")), body(t, confirmedNow("603")),
				body(t, confirmedEvent("605"))) // 605 occurred in September: stale
			r.waitConsumed(t, 4)
			b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sent_at = now() WHERE order_id = '603'`)
			cancels := []map[string]any{cancelledNow("601"), cancelledNow("603"), cancelledNow("604")}
			b.publish(t, "order.cancelled", body(t, cancels[0]), body(t, cancels[1]), body(t, cancels[2]))
			r.waitConsumed(t, 7)
			b.publish(t, "order.confirmed", body(t, confirmedNow("604")))
			r.waitConsumed(t, 8)

			require.Empty(t, b.deadLetters(t))
			require.Equal(t, map[string]string{"601": "cancelled", "602": "pending", "603": "sent", "604": "cancelled", "605": "failed"},
				b.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '604' AND event_id IS NULL`), "a tombstone")
			for _, c := range cancels {
				id, order := c["event_id"], data(c)["order_id"]
				require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = $1 AND cancel_event_id = $2`, order, id))
				require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE order_id = $1
					AND payload->'data'->>'source_event_id' = $2 AND payload->>'event_type' = event_type`, order, id))
			}
			require.Equal(t, map[string]string{"601": "EmailCancelled", "603": "EmailCancelTooLate", "604": "EmailCancelled", "605": "EmailFailed"},
				b.sc.QueryMap(t, `SELECT order_id, event_type FROM outbox`))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE order_id = '605' AND payload->'data'->>'error_reason' = 'stale'`))
			for outcome, n := range map[string]int{"cancelled": 1, "too_late": 1, "tombstoned": 1} {
				require.Equal(t, n, r.consumed(t, "OrderCancelled", outcome), outcome)
			}
			for outcome, n := range map[string]int{"inserted": 3, "stale": 1, "duplicate": 1} {
				require.Equal(t, n, r.consumed(t, "OrderConfirmed", outcome), outcome)
			}
			require.Empty(t, b.logs.matching(refusedLog))
		})
	}
}

// refusedLog is the message the consumer logs, at error level, when the
// database refuses to record events.
const refusedLog = "the database refused to record events; holding them and retrying (not the events' fault: nothing is dead-lettered)"

// refuseWrites makes PostgreSQL refuse, with SQLSTATE code (class 22: a
// data exception), every row of order orderID written to table.
func refuseWrites(t *testing.T, sc *storetest.Schema, table, orderID, code string) {
	t.Helper()
	sc.Exec(t, `CREATE OR REPLACE FUNCTION refuse_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'write refused by the test' USING ERRCODE = TG_ARGV[0]; END $$`)
	sc.Exec(t, `CREATE TRIGGER refuse_write BEFORE INSERT OR UPDATE ON `+table+`
		FOR EACH ROW WHEN (NEW.order_id = '`+orderID+`') EXECUTE FUNCTION refuse_write('`+code+`')`)
}

// A refusal of our own statement, whatever its SQLSTATE (class 22 here,
// which used to be taken for bad input), is not the event's fault: the
// deliveries are held and retried, an error naming the SQLSTATE is logged,
// nothing is dead-lettered, and the events are recorded once the database
// takes the write.
func TestRefusalOfOurStatementHoldsTheEventsUntilItPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.conn
	require.NoError(t, consumer.DeclareTopology(conn, b.cfg.WithDefaults()))
	refuseWrites(t, b.sc, "mail", "700", "22023")
	b.publish(t, "order.confirmed", body(t, confirmedNow("700")), body(t, confirmedNow("701")))
	r := b.start(t)
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= 3 }, waitFor, tick, "retrying")
	// 701 may have been recorded by a batch of its own; its ack waits
	// behind 700's (acks go in order).
	require.Equal(t, 0, r.consumedTotal(t), "held, not acked")
	require.Empty(t, b.deadLetters(t))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '700'`))
	logged := b.logs.matching(refusedLog)
	require.NotEmpty(t, logged)
	require.Equal(t, slog.LevelError, logged[0].level)
	require.Equal(t, "22023", logged[0].attrs["sqlstate"])

	b.sc.Exec(t, `DROP TRIGGER refuse_write ON mail`)
	r.waitConsumed(t, 2)
	require.Equal(t, 2, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, map[string]string{"700": "pending", "701": "pending"}, b.sc.QueryMap(t, `SELECT order_id, status FROM mail`))

	// The defect that was found: the feedback of a cancel refused with
	// 22P02. The cancel waits, then cancels; it is never dead-lettered.
	refuseWrites(t, b.sc, "outbox", "700", "22P02")
	cancel := cancelledNow("700")
	b.publish(t, "order.cancelled", body(t, cancel))
	retries := r.c.RetriesForTest()
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= retries+3 }, waitFor, tick, "retrying the cancel")
	require.Equal(t, 2, r.consumedTotal(t))
	require.Equal(t, "pending", b.sc.QueryMap(t, `SELECT order_id, status FROM mail`)["700"], "the refused transaction wrote nothing")
	require.Equal(t, "22P02", b.logs.matching(refusedLog)[len(b.logs.matching(refusedLog))-1].attrs["sqlstate"])

	b.sc.Exec(t, `DROP TRIGGER refuse_write ON outbox`)
	r.waitConsumed(t, 3)
	require.Equal(t, 1, r.consumed(t, "OrderCancelled", "cancelled"))
	require.Equal(t, map[string]string{"700": "cancelled", "701": "pending"}, b.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE order_id = '700' AND event_type = 'EmailCancelled'
		AND payload->'data'->>'source_event_id' = $1`, cancel["event_id"]))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.Empty(t, b.deadLetters(t))
	require.Equal(t, int64(0), r.c.RedeliveredForTest(), "held on the channel, never returned to the queue")
	require.Equal(t, int64(1), r.c.ConnectionsForTest())
}
