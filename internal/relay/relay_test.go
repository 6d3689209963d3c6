package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestRelayPublishesEveryRowWithItsEventID(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	// No polling: every row below goes out on a wake-up (NOTIFY or Wake).
	r := b.newRelay(t, func(c *relay.Config) { c.PollInterval = time.Hour })
	for i, typ := range mailtype.OutputEventTypes {
		b.insert(t, feedback(string(rune('a'+i)), typ))
	}
	b.start(t, r)
	got := obs.WaitFor(t, len(mailtype.OutputEventTypes))
	require.Len(t, got, len(mailtype.OutputEventTypes))
	b.insert(t, feedback("late", mailtype.EmailSent)) // wakes the relay through LISTEN/NOTIFY
	got = obs.WaitFor(t, len(mailtype.OutputEventTypes)+1)
	require.Eventually(t, func() bool {
		return value(t, b.m.Published.WithLabelValues(string(mailtype.EmailSent))) == 2
	}, 10*time.Second, 10*time.Millisecond, "counted after the mark")

	rows := b.outbox(t)
	require.Len(t, got, len(rows))
	for i, d := range got {
		row := rows[i]
		requireMessage(t, d, row)
		require.NotNil(t, row.PublishedAt)
		require.Equal(t, 0, row.Attempts)
	}
	for _, typ := range mailtype.OutputEventTypes {
		want := 1.0
		if typ == mailtype.EmailSent {
			want = 2
		}
		require.Equal(t, want, value(t, b.m.Published.WithLabelValues(string(typ))), typ)
	}
	require.Equal(t, 1.0, value(t, b.m.Leader))
	require.Equal(t, 1.0, value(t, b.bm.Connected.WithLabelValues(broker.RoleRelay)))
	for _, reason := range relay.FailureReasons {
		require.Equal(t, 0.0, b.failures(t, reason))
	}
	stopNow(t, r)
	require.Equal(t, 0.0, value(t, b.m.Leader))
	require.Equal(t, 0.0, value(t, b.bm.Connected.WithLabelValues(broker.RoleRelay)))
}

// requireMessage checks the AMQP message of row (docs/contract.md, "Output").
func requireMessage(t *testing.T, d broker.Delivery, row storetest.OutboxState) {
	t.Helper()
	require.Equal(t, row.EventID, d.MessageID)
	require.Equal(t, mailtype.EventType(row.EventType).RoutingKey(), d.RoutingKey)
	require.Equal(t, row.EventType, d.Type)
	require.Equal(t, "application/json", d.ContentType)
	require.True(t, d.Persistent)
	require.False(t, d.Timestamp.IsZero())
	var body struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		DedupeKey string `json:"dedupe_key"`
		Data      struct {
			OrderID string `json:"order_id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, row.EventID, body.EventID)
	require.Equal(t, row.EventType, body.EventType)
	require.Equal(t, row.OrderID, body.Data.OrderID)
	require.Equal(t, mailtype.ConfirmationKey(row.OrderID), body.DedupeKey)
}

func stopNow(t *testing.T, r *relay.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx), "Stop is idempotent")
}

// TestRelayMarksAfterTheDatabaseReturns: the broker acked a row, then the
// database went away before its mark. The mark is owed, not lost: the
// first fetch once the database is back writes it, and the row is not
// published again (docs/design.md, "The outbox relay lease").
func TestRelayMarksAfterTheDatabaseReturns(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{dbProxy: true})
	obs := observe(t, b.names, "#")
	r := b.newRelay(t, nil)
	reached, release := relay.PauseAfterConfirm(r)
	b.insert(t, feedback("1", mailtype.EmailSent))
	b.start(t, r)
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("no round reached its confirms")
	}
	// The broker acked; the database goes away before the mark.
	b.dbProxy.Cut()
	release()

	first := obs.WaitFor(t, 1)
	require.Len(t, first, 1)
	require.Nil(t, b.outbox(t)[0].PublishedAt, "an acked row whose mark could not be written is not published")
	require.Equal(t, 0.0, value(t, b.m.Published.WithLabelValues(string(mailtype.EmailSent))), "counted once marked")
	b.dbProxy.Restore(t)

	require.Eventually(t, func() bool { return b.countPublished(t) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return value(t, b.m.Published.WithLabelValues(string(mailtype.EmailSent))) == 1
	}, 10*time.Second, 10*time.Millisecond)
	r.Wake()
	b.insert(t, feedback("2", mailtype.EmailSent)) // a later round, to see that the first row is not sent again
	got := obs.WaitFor(t, 2)
	require.Len(t, got, 2)
	rows := b.outbox(t)
	require.Equal(t, rows[0].EventID, got[0].MessageID)
	require.Equal(t, rows[1].EventID, got[1].MessageID, "the second message is the second row, not the first again")
	require.Equal(t, 0, rows[0].Attempts)
}

func TestRelayHoldsTheBacklogWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{amqpProxy: true})
	obs := observe(t, b.names, "#")
	r := b.newRelay(t, nil)
	b.start(t, r)
	connected := func() float64 { return value(t, b.bm.Connected.WithLabelValues(broker.RoleRelay)) }
	require.Eventually(t, func() bool { return connected() == 1 }, 10*time.Second, 10*time.Millisecond)

	b.amqpProxy.Cut()
	require.Eventually(t, func() bool { return connected() == 0 }, 10*time.Second, 10*time.Millisecond)
	fs := make([]store.Feedback, 120)
	for i := range fs {
		fs[i] = feedback(fmt.Sprintf("o%d", i), mailtype.EmailSent)
	}
	b.insert(t, fs...)
	r.Wake()
	require.Never(t, func() bool { return b.countPublished(t) > 0 }, time.Second, 50*time.Millisecond,
		"nothing is marked published while the broker is unreachable")
	require.Empty(t, obs.Messages())

	b.amqpProxy.Restore(t)
	require.Eventually(t, func() bool { return b.countPublished(t) == len(fs) }, 30*time.Second, 20*time.Millisecond)
	got := obs.WaitFor(t, len(fs))
	require.Len(t, got, len(fs))
	ids := map[string]bool{}
	for _, d := range got {
		ids[d.MessageID] = true
	}
	require.Len(t, ids, len(fs), "every row arrived")
	for _, row := range b.outbox(t) {
		require.True(t, ids[row.EventID])
		require.Nil(t, row.DeadAt)
	}
}

// Feedback nobody consumes yet: with no queue bound to the events exchange
// every publish comes back unroutable. Within relay.unroutable_window that
// never makes the row dead, whatever relay.max_attempts says; once a queue
// is bound the row goes out, and its publish lag is observed once.
func TestRelayKeepsAnUnroutableRowAliveForTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	r := b.newRelay(t, func(c *relay.Config) { c.MaxAttempts = 2; c.UnroutableWindow = time.Hour })
	b.insert(t, feedback("1", mailtype.EmailFailed))
	inserted := time.Now()
	b.start(t, r) // no queue is bound to the events exchange yet

	require.Eventually(t, func() bool {
		return b.outbox(t)[0].Attempts >= 5 && b.failures(t, mailtype.ReasonUnroutable) >= 5
	}, 20*time.Second, 10*time.Millisecond, "retried past max_attempts")
	row := b.outbox(t)[0]
	require.Nil(t, row.PublishedAt)
	require.Nil(t, row.DeadAt, "not dead within the unroutable window")
	require.True(t, strings.HasPrefix(row.LastError, "unroutable: "), row.LastError)
	require.Contains(t, row.LastError, `routing key "email.failed"`)
	require.Equal(t, 0.0, value(t, b.m.Published.WithLabelValues(string(mailtype.EmailFailed))))
	n, _ := histogram(t, b.m.PublishLag)
	require.Zero(t, n, "no publish lag before a confirm")

	bound := time.Now()
	obs := observe(t, b.names, "email.*")
	got := obs.WaitFor(t, 1)
	require.Eventually(t, func() bool { return b.countPublished(t) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Len(t, obs.Messages(), 1)
	require.Equal(t, row.EventID, got[0].MessageID)
	require.Eventually(t, func() bool {
		return value(t, b.m.Published.WithLabelValues(string(mailtype.EmailFailed))) == 1
	}, 10*time.Second, 10*time.Millisecond)
	n, sum := histogram(t, b.m.PublishLag)
	require.EqualValues(t, 1, n, "one row confirmed, one lag observed")
	require.GreaterOrEqual(t, sum, bound.Sub(inserted).Seconds()-0.05,
		"the lag counts from the row's creation, the unroutable retries included")
}

// A row that is still unroutable once it is older than the window dies
// after relay.max_attempts, and is then listed for an operator.
func TestRelayUnroutableRowDiesAfterTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	r := b.newRelay(t, func(c *relay.Config) { c.MaxAttempts = 2; c.UnroutableWindow = time.Hour })
	b.insert(t, feedback("1", mailtype.EmailSent))
	b.sc.Exec(t, `UPDATE outbox SET created_at = now() - interval '61 minutes'`)
	b.start(t, r)

	require.Eventually(t, func() bool { return b.outbox(t)[0].DeadAt != nil }, 20*time.Second, 10*time.Millisecond)
	row := b.outbox(t)[0]
	require.Equal(t, 2, row.Attempts)
	require.Equal(t, 2.0, b.failures(t, mailtype.ReasonUnroutable))
}

func TestRelayDoesNotMarkANackedPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	bindRejecting(t, b.names, "#")
	r := b.newRelay(t, func(c *relay.Config) { c.MaxAttempts = 2 })
	b.insert(t, feedback("1", mailtype.EmailSent))
	b.start(t, r)

	require.Eventually(t, func() bool { return b.outbox(t)[0].DeadAt != nil }, 20*time.Second, 10*time.Millisecond)
	row := b.outbox(t)[0]
	require.Nil(t, row.PublishedAt)
	require.Equal(t, 2, row.Attempts)
	require.True(t, strings.HasPrefix(row.LastError, "nack: "), row.LastError)
	require.Eventually(t, func() bool { return b.failures(t, mailtype.ReasonNack) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, b.failures(t, mailtype.ReasonUnroutable))
}

func TestRelayChannelClosedUnderPendingConfirmsIsNeverAnAck(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	fs := make([]store.Feedback, 10)
	for i := range fs {
		fs[i] = feedback(fmt.Sprintf("o%d", i), mailtype.EmailSent)
	}
	b.insert(t, fs...)
	poison := b.outbox(t)[4]
	// A publish to a missing exchange makes the broker close the channel:
	// the confirms pending behind it come back empty.
	b.sc.Exec(t, `UPDATE outbox SET exchange = $1 WHERE id = $2`, b.names.Prefix+"missing", poison.ID)
	r := b.newRelay(t, nil) // MaxAttempts 3
	b.start(t, r)

	require.Eventually(t, func() bool { return b.outbox(t)[4].DeadAt != nil }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return b.countPublished(t) == 9 }, 20*time.Second, 10*time.Millisecond)
	rows := b.outbox(t)
	require.Nil(t, rows[4].PublishedAt)
	require.Equal(t, 3, rows[4].Attempts)
	require.Contains(t, rows[4].LastError, "channel closed")
	seen := map[string]int{}
	for _, d := range obs.Messages() {
		seen[d.MessageID]++
	}
	require.Zero(t, seen[poison.EventID])
	for i, row := range rows {
		if i != 4 {
			require.NotNil(t, row.PublishedAt)
			require.Positive(t, seen[row.EventID], "every published row reached the queue")
		}
	}
	require.GreaterOrEqual(t, b.failures(t, mailtype.ReasonBroker), 3.0)
}

func TestRelayDeadRowDoesNotHoldUpTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "email.#")
	b.insert(t, feedback("1", mailtype.EmailSent), feedback("2", mailtype.EmailSent), feedback("1", mailtype.EmailCancelTooLate))
	stuck := b.outbox(t)[0]
	// An exchange that does not exist: the broker closes the channel on
	// that publish, a failure of the row itself (an unroutable row would
	// hold nothing back at all: TestUnroutableRowDoesNotHoldBackItsOrder).
	b.sc.Exec(t, `UPDATE outbox SET exchange = exchange || '.missing' WHERE id = $1`, stuck.ID)
	r := b.newRelay(t, nil) // MaxAttempts 3
	b.start(t, r)

	require.Eventually(t, func() bool { return b.countPublished(t) == 2 }, 20*time.Second, 10*time.Millisecond)
	rows := b.outbox(t)
	require.NotNil(t, rows[0].DeadAt)
	require.Nil(t, rows[0].PublishedAt)
	require.Equal(t, 3, rows[0].Attempts)
	require.True(t, strings.HasPrefix(rows[0].LastError, "broker: "), rows[0].LastError)
	require.Contains(t, rows[0].LastError, "channel closed")
	require.GreaterOrEqual(t, b.failures(t, mailtype.ReasonBroker), 3.0)
	require.False(t, rows[2].PublishedAt.Before(*rows[0].DeadAt), "the row behind waited for the dead one")

	got := obs.WaitFor(t, 2)
	require.Len(t, got, 2)
	require.ElementsMatch(t, []string{rows[1].EventID, rows[2].EventID}, []string{got[0].MessageID, got[1].MessageID})
}

func TestRelayKeepsOneOrderInWriteOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "email.#")
	b.insert(t, feedback("1", mailtype.EmailSent), feedback("1", mailtype.EmailCancelTooLate),
		feedback("1", mailtype.EmailUnknown), feedback("2", mailtype.EmailSent))
	first := b.outbox(t)[0]
	// An exchange that does not exist: the broker closes the channel on
	// that publish, a failure of the row itself.
	b.sc.Exec(t, `UPDATE outbox SET exchange = exchange || '.missing' WHERE id = $1`, first.ID)
	r := b.newRelay(t, func(c *relay.Config) { c.MaxAttempts = 1000 })
	b.start(t, r)

	// While the first row of order 1 keeps failing, order 2 flows and the
	// rest of order 1 waits.
	require.Eventually(t, func() bool {
		rows := b.outbox(t)
		return rows[0].Attempts >= 2 && rows[3].PublishedAt != nil
	}, 20*time.Second, 10*time.Millisecond)
	rows := b.outbox(t)
	require.Nil(t, rows[1].PublishedAt)
	require.Nil(t, rows[2].PublishedAt)

	b.sc.Exec(t, `UPDATE outbox SET exchange = $2 WHERE id = $1`, first.ID, b.names.EventsExchange)
	got := obs.WaitFor(t, 4)
	require.Len(t, got, 4)
	var order1 []string
	for _, d := range got {
		if d.MessageID != rows[3].EventID {
			order1 = append(order1, d.MessageID)
		}
	}
	require.Equal(t, []string{rows[0].EventID, rows[1].EventID, rows[2].EventID}, order1)
	require.Eventually(t, func() bool { return b.countPublished(t) == 4 }, 10*time.Second, 10*time.Millisecond)
}

// An event nobody has bound a queue for (an order service that takes
// EmailSent but not EmailDelivered, say) comes back unroutable and is
// retried for relay.unroutable_window; meanwhile the later events of its
// order, which are taken, go out: an unroutable row holds nothing back.
func TestUnroutableRowDoesNotHoldBackItsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "email.#")
	b.insert(t, feedback("1", mailtype.EmailSent), feedback("1", mailtype.EmailCancelTooLate), feedback("1", mailtype.EmailUnknown))
	first := b.outbox(t)[0]
	b.sc.Exec(t, `UPDATE outbox SET routing_key = 'nobody.listens' WHERE id = $1`, first.ID)
	b.start(t, b.newRelay(t, func(c *relay.Config) { c.MaxAttempts = 3 }))

	got := obs.WaitFor(t, 2)
	rows := b.outbox(t)
	require.Equal(t, []string{rows[1].EventID, rows[2].EventID}, []string{got[0].MessageID, got[1].MessageID})
	require.Eventually(t, func() bool { return b.outbox(t)[0].Attempts >= 4 }, 20*time.Second, 10*time.Millisecond,
		"the unroutable row is retried past max_attempts")
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL AND unroutable`),
		"the unroutable row stays alive and marked, inside its window")
	require.EqualValues(t, 2, b.countPublished(t))
}

func TestRelayDeletesPublishedRowsPastRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	b.insert(t, feedback("1", mailtype.EmailSent), feedback("2", mailtype.EmailSent), feedback("3", mailtype.EmailSent))
	b.sc.Exec(t, `UPDATE outbox SET published_at = now() - interval '2 hours' WHERE order_id IN ('1', '2')`)
	r := b.newRelay(t, func(c *relay.Config) { c.RetentionWindow = time.Hour; c.RetentionBatch = 1 })
	b.start(t, r)

	require.Eventually(t, func() bool {
		rows := b.outbox(t)
		return len(rows) == 1 && rows[0].PublishedAt != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "3", b.outbox(t)[0].OrderID)
	require.Len(t, obs.WaitFor(t, 1), 1)
}

func TestStandbyTakesOverWhenTheLeaderStops(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	first := b.newRelay(t, nil)
	b.start(t, first)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)

	// A second relay in this process, with its own metrics, stands by.
	m2 := relay.NewMetrics(prometheus.NewRegistry())
	second, err := relay.New(b.cfg, b.relayStore, testLogger(t), m2, nil)
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(func() { stopNow(t, second) })
	b.insert(t, feedback("1", mailtype.EmailSent))
	obs.WaitFor(t, 1)
	require.Equal(t, 0.0, value(t, m2.Leader))
	require.Equal(t, 0.0, value(t, m2.Published.WithLabelValues(string(mailtype.EmailSent))))

	stopNow(t, first)
	require.Eventually(t, func() bool { return value(t, m2.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	b.insert(t, feedback("2", mailtype.EmailSent))
	require.Len(t, obs.WaitFor(t, 2), 2)
	require.Eventually(t, func() bool {
		return value(t, m2.Published.WithLabelValues(string(mailtype.EmailSent))) == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, b.countPublished(t))
}

func TestLeaderThatCannotReachTheBrokerStepsDown(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{amqpProxy: true})
	obs := observe(t, b.names, "#")
	cut := b.newRelay(t, nil) // reaches the broker through the proxy
	b.start(t, cut)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	b.amqpProxy.Cut()

	m2 := relay.NewMetrics(prometheus.NewRegistry())
	cfg := b.cfg
	cfg.AMQP.URL = brokertest.URL()
	direct, err := relay.New(cfg, b.relayStore, testLogger(t), m2, nil)
	require.NoError(t, err)
	require.NoError(t, direct.Start(context.Background()))
	t.Cleanup(func() { stopNow(t, direct) })
	b.insert(t, feedback("1", mailtype.EmailSent))

	require.Eventually(t, func() bool { return value(t, m2.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, value(t, b.m.Leader))
	require.Len(t, obs.WaitFor(t, 1), 1)
	require.Eventually(t, func() bool { return b.countPublished(t) == 1 }, 10*time.Second, 10*time.Millisecond)
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	r := b.newRelay(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(ctx), "Stop without Start")
	require.ErrorIs(t, r.Start(ctx), lifecycle.ErrStarted, "a relay that was stopped never starts")
	r = b.newRelay(t, nil)
	r.Wake()
	r.Wake() // never blocks
	require.NoError(t, r.Start(ctx))
	require.ErrorIs(t, r.Start(ctx), lifecycle.ErrStarted, "Start twice")
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx))
	<-r.Done()
	require.NoError(t, r.Err())
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	err := relay.Config{BatchSize: broker.MaxBatch + 1, MaxAttempts: -1, DeclareExchange: true, RetentionWindow: -time.Second}.WithDefaults().Validate()
	require.Error(t, err)
	for _, want := range []string{"AMQP.URL", "Exchange", "BatchSize", "MaxAttempts", "RetentionWindow"} {
		require.Contains(t, err.Error(), want)
	}
	c := relay.Config{AMQP: broker.Config{URL: "amqp://x"}}.WithDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, 100, c.BatchSize)
	require.Equal(t, 10, c.MaxAttempts)
	require.Equal(t, 10*time.Second, c.ConfirmTimeout)
	require.Equal(t, time.Second, c.PollInterval)
}

// TestRelayDeclaresTheEventsQueue: with amqp.events_queue set, the relay
// declares that queue bound with "#" to the events exchange, so feedback
// events are kept (not unroutable) where no service bound its own queue.
func TestRelayDeclaresTheEventsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	r := b.newRelay(t, func(c *relay.Config) { c.EventsQueue = b.names.EventsQueue })
	b.insert(t, feedback("q1", mailtype.EmailSent), feedback("q2", mailtype.EmailFailed))
	b.start(t, r)
	require.Eventually(t, func() bool { return b.countPublished(t) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, brokertest.Depth(t, b.names.EventsQueue))
}

// The queue gauges follow the last known leader: a leader that loses the
// database steps down (mailsvc_relay_leader 0) but stays the last known
// leader, since no replica can take the lease meanwhile; once the database
// is back and it sees another relay hold the lease, it is no longer one.
// A stopped relay never is.
func TestLastKnownLeaderOutlivesADatabaseOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{dbProxy: true})
	first := b.newRelay(t, nil) // through the proxy
	require.False(t, first.LastKnownLeader())
	b.start(t, first)
	require.Eventually(t, first.LastKnownLeader, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value(t, b.m.Leader))

	b.dbProxy.Cut()
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 0 }, 10*time.Second, 10*time.Millisecond, "stepped down")
	require.True(t, first.LastKnownLeader(), "no one else can lead while the database is down")

	// Another relay, with a working database link, takes the lease: a
	// partition, during which both are last known leaders.
	m2 := relay.NewMetrics(prometheus.NewRegistry())
	second, err := relay.New(b.cfg, b.writer, testLogger(t), m2, nil)
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(func() { stopNow(t, second) })
	require.Eventually(t, func() bool { return value(t, m2.Leader) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.True(t, second.LastKnownLeader())
	require.True(t, first.LastKnownLeader())

	b.dbProxy.Restore(t)
	require.Eventually(t, func() bool { return !first.LastKnownLeader() }, 20*time.Second, 10*time.Millisecond,
		"the first relay sees the second hold the lease")
	require.True(t, second.LastKnownLeader())
	stopNow(t, second)
	require.False(t, second.LastKnownLeader(), "a stopped relay reads no queue")
}
