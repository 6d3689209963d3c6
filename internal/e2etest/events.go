package e2etest

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

// OrderEvent is an input event as an order service publishes it
// (docs/contract.md, "Input").
type OrderEvent struct {
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	Version    int            `json:"version"`
	OccurredAt time.Time      `json:"occurred_at"`
	DedupeKey  string         `json:"dedupe_key,omitempty"`
	Data       map[string]any `json:"data"`
}

// Item is one line of an order (data.items[]).
type Item struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice string `json:"unit_price"`
}

// Confirmed builds an OrderConfirmed for order id; vi customers buy in VND,
// en customers in USD.
func Confirmed(id int, locale string) OrderEvent {
	oid := fmt.Sprint(id)
	data := map[string]any{
		"order_id": oid, "email": fmt.Sprintf("customer%d@example.com", id), "locale": locale,
	}
	if locale == "vi" {
		data["customer_name"], data["currency"], data["total"] = "Nguyễn Văn B", "VND", "1250000"
		data["items"] = []Item{{"SKU-1", "Áo thun", 2, "625000"}}
	} else {
		data["customer_name"], data["currency"], data["total"] = "Jane Doe", "USD", "25.50"
		data["items"] = []Item{{"SKU-2", "T-shirt", 1, "12.50"}, {"SKU-3", "Socks", 2, "6.50"}}
	}
	return OrderEvent{EventID: NewID(), EventType: "OrderConfirmed", Version: 1, OccurredAt: time.Now().UTC(),
		DedupeKey: "order-confirmed:" + oid, Data: data}
}

// Cancelled builds an OrderCancelled of revision 1 for order id.
func Cancelled(id int) OrderEvent {
	return OrderEvent{EventID: NewID(), EventType: "OrderCancelled", Version: 1, OccurredAt: time.Now().UTC(),
		DedupeKey: fmt.Sprintf("order-cancelled:%d", id), Data: map[string]any{"order_id": fmt.Sprint(id), "reason": "customer request"}}
}

// NewID returns a fresh UUIDv7 event id.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Publisher is an independent AMQP Publisher (not mailsvc's code) with
// Publisher confirms.
type Publisher struct {
	Conn *amqp.Connection
	Ch   *amqp.Channel
	Ex   string
}

// NewPublisher declares the input exchange (as the order service's own
// topology would) and returns a confirming Publisher.
func NewPublisher(t testing.TB, n *brokertest.Names) *Publisher {
	t.Helper()
	conn := brokertest.DialRaw(t)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(n.InputExchange, "topic", true, false, false, false, nil))
	require.NoError(t, ch.Confirm(false))
	return &Publisher{Conn: conn, Ch: ch, Ex: n.InputExchange}
}

// Publish sends events with confirms, routing by event type.
func (p *Publisher) Publish(t testing.TB, evs ...OrderEvent) {
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
		c, err := p.Ch.PublishWithDeferredConfirmWithContext(ctx, p.Ex, key, false, false, amqp.Publishing{
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

// Feedback is an output event read from mail.events.
type Feedback struct {
	MessageID  string
	RoutingKey string
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	DedupeKey  string         `json:"dedupe_key"`
	Data       map[string]any `json:"data"`
}

// FeedbackQueue binds a queue to the events exchange (declared here as
// mailsvc declares it: topic, durable) and collects every event.
type FeedbackQueue struct {
	Ch  *amqp.Channel
	Out <-chan amqp.Delivery
}

// NewFeedbackQueue binds a queue of the test's own to the events exchange.
func NewFeedbackQueue(t testing.TB, n *brokertest.Names) *FeedbackQueue {
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
	return &FeedbackQueue{Ch: ch, Out: out}
}

// Collect reads events until want distinct ones (by event_id) arrived,
// or fails once within passed.
func (q *FeedbackQueue) Collect(t testing.TB, want int, within time.Duration) []Feedback {
	t.Helper()
	var got []Feedback
	seen := map[string]bool{}
	deadline := time.After(within)
	for len(got) < want {
		select {
		case d := <-q.Out:
			RequireContract(t, d)
			var f Feedback
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
			t.Fatalf("got %d Feedback events, want %d", len(got), want)
		}
	}
	return got
}

// RequireContract fails the test unless d is a Feedback event as
// api/asyncapi.yaml describes it: its body valid by its type's schema, its
// routing key and properties those of the document.
func RequireContract(t testing.TB, d amqp.Delivery) {
	t.Helper()
	reasons := api.ValidateFeedbackMessage(api.Message{RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
		ContentType: d.ContentType, Persistent: d.DeliveryMode == amqp.Persistent, Body: d.Body})
	require.Empty(t, reasons, "a Feedback event breaks the contract (api/asyncapi.yaml): %s", d.Body)
}
