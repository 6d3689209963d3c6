package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

func confirmations(t *testing.T, from, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		out[i] = body(t, confirmedNow(fmt.Sprint(from+i)))
	}
	return out
}

// failCommits makes every commit that inserted a mail of orderID fail
// with a serialization failure (a transient error), at COMMIT time: a
// deferred constraint trigger runs when the transaction commits.
func failCommits(t *testing.T, b *bundle, orderID string) {
	t.Helper()
	b.sc.Exec(t, `CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'commit refused by the test' USING ERRCODE = '40001'; END $$`)
	b.sc.Exec(t, fmt.Sprintf(`CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON mail
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.order_id = '%s') EXECUTE FUNCTION fail_commit()`, orderID))
}

func allowCommits(t *testing.T, b *bundle) {
	t.Helper()
	b.sc.Exec(t, `DROP TRIGGER fail_commit ON mail`)
}

func TestBrokerConnectionCutMidStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	px := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	b.cfg.URL = px.RewriteURL(t, brokertest.URL())
	b.cfg.Prefetch, b.cfg.BatchSize = 100, 50
	r := b.start(t)
	const n = 2000
	b.publish(t, "order.confirmed", confirmations(t, 10000, n)...)
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) >= 300 }, waitFor, tick)
	px.Cut()
	require.Eventually(t, func() bool {
		return r.metric(t, "mailsvc_amqp_connected", "role", "consumer") == 0
	}, waitFor, tick, "the consumer saw the connection go")
	px.Restore(t)

	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) == n }, waitFor, tick, "nothing lost")
	require.Eventually(t, func() bool { return b.queueDepth(t, b.names.Queue) == 0 && r.consumedTotal(t) >= n }, waitFor, tick)
	require.Equal(t, n, b.count(t, `SELECT count(DISTINCT event_id) FROM mail WHERE status = 'pending'`), "nothing duplicated")
	ins, dup := r.consumed(t, "OrderConfirmed", "inserted"), r.consumed(t, "OrderConfirmed", "duplicate")
	require.Equal(t, r.consumedTotal(t), ins+dup)
	require.LessOrEqual(t, ins, n)
	require.Equal(t, int64(2), r.c.ConnectionsForTest(), "one reconnect; no ack on the new channel for an old delivery killed it")
	require.Empty(t, b.deadLetters(t))
	require.Equal(t, 1.0, r.metric(t, "mailsvc_amqp_connected", "role", "consumer"))
}

func TestDatabaseOutageHoldsDeliveriesWithoutAckOrDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	px := b.proxiedStore(t)
	r := b.start(t)
	px.Cut()
	const n = 40
	b.publish(t, "order.confirmed", confirmations(t, 20000, n)...)
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= 3 }, waitFor, tick, "retrying")
	require.Equal(t, 0, r.consumedTotal(t), "nothing acked")
	require.Empty(t, b.deadLetters(t), "nothing dead-lettered")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail`))

	px.Restore(t)
	r.waitConsumed(t, n)
	require.Equal(t, n, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(0), r.c.RedeliveredForTest(), "no delivery went back to the queue: the delivery limit is untouched")
	require.Equal(t, int64(1), r.c.ConnectionsForTest())
	require.Empty(t, b.deadLetters(t))
}

// When the channel dies during a database outage (here closed under the
// connection, as the broker does on its consumer acknowledgement timeout), the
// new connection does not take deliveries until the database answers.
func TestNewSessionWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	px := b.proxiedStore(t)
	r := b.start(t)
	px.Cut()
	const n = 10
	b.publish(t, "order.confirmed", confirmations(t, 30000, n)...)
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= 2 }, waitFor, tick)
	require.NoError(t, r.c.CloseChannelForTest())
	require.Eventually(t, func() bool { return b.queueDepth(t, b.names.Queue) == n }, waitFor, tick, "held deliveries went back")
	require.Equal(t, int64(1), r.c.ConnectionsForTest(), "no consuming while the database is down")
	require.Equal(t, 0, r.consumedTotal(t))

	px.Restore(t)
	r.waitConsumed(t, n)
	require.Equal(t, n, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, int64(2), r.c.ConnectionsForTest())
	require.Equal(t, int64(n), r.c.RedeliveredForTest(), "each message went back once, not once per retry")
	require.Empty(t, b.deadLetters(t))
}

func TestFailedCommitIsNeverAcked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failCommits(t, b, "900")
	r1 := b.start(t)
	b.publish(t, "order.confirmed", body(t, confirmedNow("900")))
	require.Eventually(t, func() bool { return r1.c.RetriesForTest() >= 3 }, waitFor, tick, "the commit fails again and again")
	require.Equal(t, 0, r1.consumedTotal(t), "not acked")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail`))

	// The process dies with the delivery unacknowledged: the broker gives
	// it to the next consumer.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r1.c.Stop(ctx), context.DeadlineExceeded, "a hard stop: the commit never succeeded")
	require.Eventually(t, func() bool { return b.queueDepth(t, b.names.Queue) == 1 }, waitFor, tick, "back in the queue")
	allowCommits(t, b)
	r2 := b.start(t)
	r2.waitConsumed(t, 1)
	require.Equal(t, 1, r2.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, int64(1), r2.c.RedeliveredForTest(), "the same message, redelivered")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '900'`))
}

// A channel that closes while its batch is held (the broker does this on
// its consumer acknowledgement timeout) abandons the batch: the new
// connection gets it again and acks it on the new channel with the new tag.
func TestChannelClosedUnderAHeldBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failCommits(t, b, "910")
	r := b.start(t)
	b.publish(t, "order.confirmed", body(t, confirmedNow("910")), body(t, confirmedNow("911")))
	require.Eventually(t, func() bool { return r.c.RetriesForTest() >= 2 }, waitFor, tick)
	require.NoError(t, r.c.CloseChannelForTest())
	require.Eventually(t, func() bool { return r.c.ConnectionsForTest() == 2 }, waitFor, tick, "reconnected")
	allowCommits(t, b)
	r.waitConsumed(t, 2)
	// 911 may have been recorded by a batch of its own in the first
	// connection, its ack held behind 910's (acks go in order): then the new
	// connection finds it a duplicate.
	inserted := r.consumed(t, "OrderConfirmed", "inserted")
	require.Equal(t, 2, inserted+r.consumed(t, "OrderConfirmed", "duplicate"))
	require.GreaterOrEqual(t, inserted, 1)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(2), r.c.RedeliveredForTest(), "both unacked deliveries came back once")
	require.Equal(t, int64(2), r.c.ConnectionsForTest(), "no stale delivery tag was acked on the new channel")
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue))
}

func TestDeletedQueueIsRedeclared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	b.publish(t, "order.confirmed", body(t, confirmedNow("920")))
	r.waitConsumed(t, 1)
	brokertest.DeleteQueue(t, b.names.Queue)
	require.Eventually(t, func() bool { return r.c.ConnectionsForTest() == 2 && r.c.Ready(b.ctx) == nil }, waitFor, tick, "the broker's cancel ended the session")
	b.publish(t, "order.confirmed", body(t, confirmedNow("921")))
	r.waitConsumed(t, 2)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM mail`))
}

func TestGracefulStopFinishesAndAcksWhatIsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Prefetch, b.cfg.BatchSize = 100, 10
	r1 := b.start(t)
	const n = 600
	b.publish(t, "order.confirmed", confirmations(t, 40000, n)...)
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) >= 50 }, waitFor, tick)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, r1.c.Stop(ctx))
	require.Error(t, r1.c.Ready(ctx))

	recorded := b.count(t, `SELECT count(*) FROM mail`)
	require.Equal(t, recorded, r1.consumedTotal(t), "every recorded event was acked")
	require.Equal(t, n-recorded, b.queueDepth(t, b.names.Queue), "every other one is back in the queue")
	require.Equal(t, 1.0*0, r1.metric(t, "mailsvc_amqp_connected", "role", "consumer"))
	r2 := b.start(t)
	r2.waitConsumed(t, n-recorded)
	require.Equal(t, n-recorded, r2.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM mail`))
}

// A value PostgreSQL cannot store (jsonb cannot hold \u0000; here in a
// field the consumer does not read) is found when the event is parsed,
// before any SQL: only that event is dead-lettered, its neighbours in the
// same batch are recorded.
func TestValueTheDatabaseCannotStoreDeadLettersOnlyItsEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, consumer.DeclareTopology(conn, b.cfg.WithDefaults()))
	bad := withData(confirmedNow("951"), "note", "a\u0000b")
	bodies := append(confirmations(t, 940, 5), body(t, bad))
	bodies = append(bodies, confirmations(t, 960, 5)...)
	b.publish(t, "order.confirmed", bodies...) // before the consumer starts: one batch
	r := b.start(t)
	r.waitConsumed(t, 11)
	require.Equal(t, 10, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "dead_lettered"))
	require.Equal(t, 10, b.count(t, `SELECT count(*) FROM mail`))
	dead := b.deadLetters(t)
	require.Len(t, dead, 1)
	require.Equal(t, "invalid_field", dead[0].Headers[deadletter.HeaderErrorReason])
	require.Equal(t, bad["event_id"], dead[0].MessageID)
}

// A deleted dead-letter queue makes the publish of a poison message come
// back unroutable: the message is held (not acked, not lost), the connection
// ends, and the reconnect declares the queue again.
func TestDeletedDeadLetterQueueIsRepaired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	brokertest.DeleteQueue(t, b.names.DeadLetterQueue)
	b.publish(t, "order.confirmed", []byte(`not json`), body(t, confirmedNow("970")))
	r.waitConsumed(t, 2)
	// The confirm may have committed in the connection the failed dead-letter
	// ended (then its redelivery is a duplicate): either way one row.
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "inserted")+r.consumed(t, "OrderConfirmed", "duplicate"))
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:970'`))
	require.Equal(t, 1, r.consumed(t, "other", "dead_lettered"))
	require.Equal(t, int64(2), r.c.ConnectionsForTest(), "one reconnect repaired the topology")
	dead := b.deadLetters(t)
	require.Len(t, dead, 1)
	require.Equal(t, []byte(`not json`), dead[0].Body)
	require.Equal(t, true, dead[0].Headers[deadletter.HeaderRedelivered], "held, then redelivered once")
}
