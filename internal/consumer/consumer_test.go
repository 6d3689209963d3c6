package consumer_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

func TestSameEventThreeTimesAndSameIntentMakeOneRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	ev := confirmedNow("100")
	again := confirmedNow("100") // other event_id, same dedupe_key
	b.publish(t, "order.confirmed", body(t, ev), body(t, ev), body(t, ev), body(t, again))
	r.waitConsumed(t, 4)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE event_id = $1 AND status = 'pending'
		AND dedupe_key = 'order-confirmed:100' AND subject <> '' AND message_id <> ''`, ev["event_id"]))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, 3, r.consumed(t, "OrderConfirmed", "duplicate"))
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue))
	require.Equal(t, 1.0, r.metric(t, "mailsvc_amqp_connected", "role", "consumer"))
}

func TestCancelBeforeConfirmLeavesOneTombstone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	cancel := cancelledNow("200")
	b.publish(t, "order.cancelled", body(t, cancel))
	r.waitConsumed(t, 1)
	b.publish(t, "order.confirmed", body(t, confirmedNow("200")))
	b.publish(t, "order.cancelled", body(t, cancel)) // redelivered cancel
	r.waitConsumed(t, 3)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE event_id IS NULL AND status = 'cancelled'
		AND dedupe_key = 'order-confirmed:200' AND cancel_event_id = $1`, cancel["event_id"]))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled' AND dedupe_key = 'order-confirmed:200'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, 1, r.consumed(t, "OrderCancelled", "tombstoned"))
	require.Equal(t, 1, r.consumed(t, "OrderCancelled", "duplicate"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "duplicate"))
}

func TestCancelPendingSendingAndSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	b.publish(t, "order.confirmed", body(t, confirmedNow("301")), body(t, confirmedNow("302")), body(t, confirmedNow("303")))
	r.waitConsumed(t, 3)
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, sends = 1, send_started_at = now(), locked_until = now() + interval '1 minute' WHERE order_id = '302'`)
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sent_at = now() WHERE order_id = '303'`)
	cancels := [][]byte{body(t, cancelledNow("301")), body(t, cancelledNow("302")), body(t, cancelledNow("303"))}
	b.publish(t, "order.cancelled", cancels...)
	b.publish(t, "order.cancelled", cancels...) // redelivered: nothing more
	r.waitConsumed(t, 9)

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '301' AND status = 'cancelled'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '302' AND status = 'sending' AND cancel_requested`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = '303' AND status = 'sent' AND NOT cancel_requested`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled' AND order_id = '301'`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM outbox WHERE order_id = '302'`), "a started send's outcome reports, not the cancel")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelTooLate' AND order_id = '303'`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, 2, r.consumed(t, "OrderCancelled", "cancelled"))
	require.Equal(t, 1, r.consumed(t, "OrderCancelled", "too_late"))
	require.Equal(t, 3, r.consumed(t, "OrderCancelled", "duplicate"))
}

func TestStaleConfirmationIsRecordedAndReportedFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	ev := confirmedEvent("400") // occurred in September: older than 24 h
	b.publish(t, "order.confirmed", body(t, ev), body(t, ev))
	r.waitConsumed(t, 2)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:400' AND status = 'failed'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed' AND payload->'data'->>'error_reason' = 'stale'`))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "stale"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "duplicate"))
}

func TestPoisonGoesToDeadLetterQueueOnFirstDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	poison := map[mailtype.Reason][]byte{
		mailtype.ReasonTooLarge:           []byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`),
		mailtype.ReasonMalformedJSON:      []byte(`{"event_id": "`),
		mailtype.ReasonMissingField:       body(t, without(confirmedNow("501"), "dedupe_key")),
		mailtype.ReasonUnsupportedVersion: body(t, with(confirmedNow("502"), "version", 2)),
		mailtype.ReasonInvalidAddress:     body(t, withData(confirmedNow("503"), "email", "b@example.com\r\nBcc: x@evil.example")),
		mailtype.ReasonInvalidField:       body(t, withData(confirmedNow("504"), "customer_name", "x\ny")),
	}
	good := confirmedNow("505")
	for _, p := range poison {
		b.publish(t, "order.confirmed", p)
	}
	b.publish(t, "order.confirmed", body(t, good))
	r.waitConsumed(t, len(poison)+1)

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE event_id = $1`, good["event_id"]))
	require.Equal(t, len(poison), r.consumed(t, "OrderConfirmed", "dead_lettered")+r.consumed(t, "other", "dead_lettered"))
	dead := b.deadLetters(t)
	require.Len(t, dead, len(poison))
	for _, d := range dead {
		reason := mailtype.Reason(d.Headers[deadletter.HeaderErrorReason].(string))
		require.Equal(t, poison[reason], d.Body, "reason %s carries its own message", reason)
		require.Equal(t, "permanent", d.Headers[deadletter.HeaderErrorClass])
		require.Equal(t, "order.confirmed", d.Headers[deadletter.HeaderOriginalRoutingKey])
		require.Equal(t, "order.confirmed", d.RoutingKey)
		require.Equal(t, b.names.InputExchange, d.Headers[deadletter.HeaderOriginalExchange])
		require.Equal(t, false, d.Headers[deadletter.HeaderRedelivered], "dead-lettered on its first delivery")
		require.NotEmpty(t, d.Headers[deadletter.HeaderDeadLetteredAt])
		require.NotContains(t, d.Headers[deadletter.HeaderError], "b@example.com", "sanitized")
		require.Equal(t, 1.0, r.metric(t, "mailsvc_events_dead_lettered_total", "reason", string(reason)))
	}
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue))
}

func TestUnknownEventTypeIsAckedAndIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.BindingKeys = []string{"order.*"}
	r := b.start(t)
	b.publish(t, "order.shipped", []byte(`{"event_id":"`+uuid.NewString()+`","event_type":"OrderShipped","version":1}`))
	b.publish(t, "order.confirmed", body(t, confirmedNow("600")))
	r.waitConsumed(t, 2)
	require.Equal(t, 1, r.consumed(t, "other", "ignored"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Empty(t, b.deadLetters(t))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail`))
}

func TestTopologyDeclarationIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t)
	r := b.start(t) // a second replica declares the same topology again
	b.publish(t, "order.confirmed", body(t, confirmedNow("700")))
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) == 1 }, waitFor, tick)
	require.Equal(t, 1.0, r.metric(t, "mailsvc_amqp_connected", "role", "consumer"))
}

func without(ev map[string]any, key string) map[string]any {
	delete(ev, key)
	return ev
}

func with(ev map[string]any, key string, v any) map[string]any {
	ev[key] = v
	return ev
}

func withData(ev map[string]any, key string, v any) map[string]any {
	data(ev)[key] = v
	return ev
}

// The line of each delivery says whether the broker delivered it before:
// a message read and given back (a consumer that died holding it) comes
// back flagged, a fresh one does not.
func TestDeliveryLineCarriesTheRedeliveredFlag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.logs.level.Set(slog.LevelDebug)
	require.NoError(t, consumer.DeclareTopology(b.conn, b.cfg))
	again, fresh := confirmedNow("300"), confirmedNow("301")
	b.publish(t, "order.confirmed", body(t, again))
	g, err := broker.NewGetter(b.conn)
	require.NoError(t, err)
	_, ok, err := g.Get(b.names.Queue)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, g.Close(), "closing the channel gives the unacked message back")
	b.publish(t, "order.confirmed", body(t, fresh))
	r := b.start(t)
	r.waitConsumed(t, 2)
	flags := map[string]string{}
	for _, rec := range b.logs.matching("event consumed") {
		flags[rec.attrs["event_id"]] = rec.attrs["redelivered"]
	}
	require.Equal(t, map[string]string{again["event_id"].(string): "true", fresh["event_id"].(string): "false"}, flags)
	require.Equal(t, int64(1), r.c.RedeliveredForTest())
}

// A producer that reuses an event_id for another order: the second event
// is not a redelivery (its dedupe_key differs), so it is dead-lettered
// with reason invalid_field, naming the event id, instead of being taken
// for a duplicate and losing its mail without a word. A true redelivery
// of either event is still a duplicate, in the same batch or later.
func TestReusedEventIDIsDeadLetteredNotDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(t)
	first := confirmedNow("600")
	second := confirmedNow("601")
	second["event_id"] = first["event_id"]
	b.publish(t, "order.confirmed", body(t, first), body(t, second), body(t, first))
	r.waitConsumed(t, 3)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE event_id = $1 AND dedupe_key = 'order-confirmed:600'`, first["event_id"]))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "inserted"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "duplicate"))
	require.Equal(t, 1, r.consumed(t, "OrderConfirmed", "dead_lettered"))
	dead := b.deadLetters(t)
	require.Len(t, dead, 1)
	require.Equal(t, body(t, second), dead[0].Body)
	require.Equal(t, "invalid_field", deadletter.Reason(dead[0].Headers))
	require.Contains(t, dead[0].Headers[deadletter.HeaderError], "already used by an event with another dedupe_key")
	require.Equal(t, 0, b.queueDepth(t, b.names.Queue))
}
