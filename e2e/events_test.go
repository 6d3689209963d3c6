package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// orderEvent is an input event as an order service publishes it
// (docs/contract.md, "Input").
type orderEvent struct {
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	Version    int            `json:"version"`
	OccurredAt time.Time      `json:"occurred_at"`
	DedupeKey  string         `json:"dedupe_key,omitempty"`
	Data       map[string]any `json:"data"`
}

type item struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice string `json:"unit_price"`
}

// confirmed builds an OrderConfirmed for order id; vi customers buy in VND,
// en customers in USD.
func confirmed(id int, locale string) orderEvent {
	oid := fmt.Sprint(id)
	data := map[string]any{
		"order_id": oid, "email": fmt.Sprintf("customer%d@example.com", id), "locale": locale,
	}
	if locale == "vi" {
		data["customer_name"], data["currency"], data["total"] = "Nguyễn Văn B", "VND", "1250000"
		data["items"] = []item{{"SKU-1", "Áo thun", 2, "625000"}}
	} else {
		data["customer_name"], data["currency"], data["total"] = "Jane Doe", "USD", "25.50"
		data["items"] = []item{{"SKU-2", "T-shirt", 1, "12.50"}, {"SKU-3", "Socks", 2, "6.50"}}
	}
	return orderEvent{EventID: newID(), EventType: "OrderConfirmed", Version: 1, OccurredAt: time.Now().UTC(),
		DedupeKey: "order-confirmed:" + oid, Data: data}
}

func cancelled(id int) orderEvent {
	return orderEvent{EventID: newID(), EventType: "OrderCancelled", Version: 1, OccurredAt: time.Now().UTC(),
		DedupeKey: fmt.Sprintf("order-cancelled:%d", id), Data: map[string]any{"order_id": fmt.Sprint(id), "reason": "customer request"}}
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// publisher is an independent AMQP publisher (not mailsvc's code) with
// publisher confirms.
type publisher struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	ex   string
}

// newPublisher declares the input exchange (as the order service's own
// topology would) and returns a confirming publisher.
func newPublisher(t testing.TB, n *brokertest.Names) *publisher {
	t.Helper()
	conn := brokertest.DialRaw(t)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(n.InputExchange, "topic", true, false, false, false, nil))
	require.NoError(t, ch.Confirm(false))
	return &publisher{conn: conn, ch: ch, ex: n.InputExchange}
}

// publish sends events with confirms, routing by event type.
func (p *publisher) publish(t testing.TB, evs ...orderEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var confs []*amqp.DeferredConfirmation
	for _, ev := range evs {
		body, err := json.Marshal(ev)
		require.NoError(t, err)
		key := "order.confirmed"
		if ev.EventType == "OrderCancelled" {
			key = "order.cancelled"
		}
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.ex, key, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: ev.EventID, Type: ev.EventType, Body: body,
		})
		require.NoError(t, err)
		confs = append(confs, c)
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "broker nacked a test event")
	}
}

// feedback is an output event read from mail.events.
type feedback struct {
	MessageID  string
	RoutingKey string
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	DedupeKey  string         `json:"dedupe_key"`
	Data       map[string]any `json:"data"`
}

// feedbackQueue binds a queue to the events exchange (declared here as
// mailsvc declares it: topic, durable) and collects every event.
type feedbackQueue struct {
	ch  *amqp.Channel
	out <-chan amqp.Delivery
}

func newFeedbackQueue(t testing.TB, n *brokertest.Names) *feedbackQueue {
	t.Helper()
	conn := brokertest.DialRaw(t)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(n.EventsExchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(n.EventsQueue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(n.EventsQueue, "#", n.EventsExchange, false, nil))
	out, err := ch.Consume(n.EventsQueue, "", true, false, false, false, nil)
	require.NoError(t, err)
	return &feedbackQueue{ch: ch, out: out}
}

// collect reads events until want distinct ones (by event_id) arrived,
// or fails once within passed.
func (q *feedbackQueue) collect(t testing.TB, want int, within time.Duration) []feedback {
	t.Helper()
	var got []feedback
	seen := map[string]bool{}
	deadline := time.After(within)
	for len(got) < want {
		select {
		case d := <-q.out:
			requireContract(t, d)
			var f feedback
			require.NoError(t, json.Unmarshal(d.Body, &f))
			f.MessageID, f.RoutingKey = d.MessageId, d.RoutingKey
			if seen[f.EventID] {
				// The relay is at-least-once: a process killed between the
				// broker's confirm and its mark publishes the row again,
				// with the same event_id, which consumers dedupe on.
				continue
			}
			seen[f.EventID] = true
			got = append(got, f)
		case <-deadline:
			t.Fatalf("got %d feedback events, want %d", len(got), want)
		}
	}
	return got
}

// requireContract fails the test unless d is a feedback event as
// api/asyncapi.yaml describes it: its body valid by its type's schema, its
// routing key and properties those of the document.
func requireContract(t testing.TB, d amqp.Delivery) {
	t.Helper()
	reasons := api.ValidateFeedbackMessage(api.Message{RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
		ContentType: d.ContentType, Persistent: d.DeliveryMode == amqp.Persistent, Body: d.Body})
	require.Empty(t, reasons, "a feedback event breaks the contract (api/asyncapi.yaml): %s", d.Body)
}
