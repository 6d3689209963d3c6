// Command producer publishes one OrderConfirmed or OrderCancelled event to
// mailsvc the way the contract asks (docs/contract.md, "Input"): a
// persistent message on the topic exchange order.events with routing key
// order.confirmed or order.cancelled, message_id = event_id, type =
// event_type, content_type application/json, published mandatory and with
// publisher confirms. It exits 0 only once the broker confirmed the event
// into a bound queue; 1 on a nack (mailsvc's queue is full: keep the event
// in your outbox and publish it again later), a return (no queue bound:
// mailsvc has not declared its topology yet) or any other error.
//
// Usage:
//
//	producer -kind confirmed -order 1001 -email a@example.com [-revision 2] [-event-id UUID]
//	producer -kind cancelled -order 1001 [-revision 2]
//
// AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) and ORDER_EXCHANGE
// (default order.events) say where to publish. The event's JSON is printed
// on stdout. Reuse -event-id when you publish the same event again (after a
// timeout or a nack): mailsvc dedupes on it, and on dedupe_key.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Item is one order line; amounts are decimal strings in major units.
type Item struct {
	SKU       string `json:"sku,omitempty"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice string `json:"unit_price"`
}

// Event is the envelope of both input event types (api/schemas/order-event.json).
type Event struct {
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	Version    int            `json:"version"`
	OccurredAt time.Time      `json:"occurred_at"`
	DedupeKey  string         `json:"dedupe_key"`
	Data       map[string]any `json:"data"`
}

// DedupeKey returns the contract's key of an order's event: the
// confirmation of revision 1 is order-confirmed:{order_id}, revision n > 1
// order-confirmed:{order_id}:r{n}; a cancel's key is not used by mailsvc
// and follows the same convention with order-cancelled.
func DedupeKey(kind, orderID string, revision int) string {
	key := "order-" + kind + ":" + orderID
	if revision > 1 {
		key += fmt.Sprintf(":r%d", revision)
	}
	return key
}

func main() {
	kind := flag.String("kind", "confirmed", "confirmed or cancelled")
	order := flag.String("order", "", "order id (required)")
	revision := flag.Int("revision", 1, "the order's revision, 1 or more: a confirmation after a cancel is the next revision")
	email := flag.String("email", "", "the customer's address (confirmed)")
	name := flag.String("name", "", "the customer's name (confirmed)")
	locale := flag.String("locale", "en", "the mail's language, vi or en (confirmed)")
	eventID := flag.String("event-id", "", "the event's id when publishing it again; default a new UUIDv7")
	flag.Parse()
	ev, err := build(*kind, *order, *revision, *email, *name, *locale, *eventID)
	if err == nil {
		err = publish(env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), env("ORDER_EXCHANGE", "order.events"), ev)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(ev)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// build returns the event, or an error naming the flag that is wrong.
func build(kind, order string, revision int, email, name, locale, eventID string) (Event, error) {
	if order == "" {
		return Event{}, errors.New("-order is required")
	}
	if revision < 1 {
		return Event{}, errors.New("-revision must be 1 or more")
	}
	if eventID == "" {
		eventID = uuid.Must(uuid.NewV7()).String()
	}
	ev := Event{EventID: eventID, Version: 1, OccurredAt: time.Now().UTC(), DedupeKey: DedupeKey(kind, order, revision),
		Data: map[string]any{"order_id": order, "revision": revision}}
	switch kind {
	case "confirmed":
		if email == "" {
			return Event{}, errors.New("-email is required with -kind confirmed")
		}
		ev.EventType = "OrderConfirmed"
		ev.Data["email"], ev.Data["customer_name"], ev.Data["locale"] = email, name, locale
		ev.Data["currency"], ev.Data["total"] = "USD", "25.50"
		ev.Data["items"] = []Item{{SKU: "SKU-2", Name: "T-shirt", Quantity: 1, UnitPrice: "12.50"}, {SKU: "SKU-3", Name: "Socks", Quantity: 2, UnitPrice: "6.50"}}
	case "cancelled":
		ev.EventType = "OrderCancelled"
		ev.Data["reason"] = "customer request"
	default:
		return Event{}, fmt.Errorf("-kind %q: want confirmed or cancelled", kind)
	}
	return ev, nil
}

// publish sends ev and waits for the broker's confirm, at most 30 s.
func publish(url, exchange string, ev Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// The exchange is shared with mailsvc, which declares it the same way;
	// declaring is idempotent.
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", exchange, err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	routingKey := map[string]string{"OrderConfirmed": "order.confirmed", "OrderCancelled": "order.cancelled"}[ev.EventType]
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, true, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    ev.EventID,
		Type:         ev.EventType,
		Timestamp:    ev.OccurredAt,
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	acked, err := conf.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("no confirm within 30 s (publish the same event_id again later): %w", err)
	}
	// A returned message is delivered to returns before its confirm.
	select {
	case r := <-returns:
		return fmt.Errorf("returned %d %s: no queue is bound to %s for %s (is mailsvc running?)", r.ReplyCode, r.ReplyText, exchange, routingKey)
	default:
	}
	if !acked {
		return errors.New("nacked by the broker (mailsvc's queue is full): keep the event and publish it again later")
	}
	return nil
}
