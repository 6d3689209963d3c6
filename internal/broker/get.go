package broker

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrNoQueue is returned by Getter.Depth when the queue does not exist.
var ErrNoQueue = errors.New("queue does not exist")

// Getter reads messages one at a time with basic.get and manual
// acknowledgement, for `mailsvc dlq replay`. Every message it returns is
// unacknowledged until Ack or Requeue; Close requeues the rest. It is not
// safe for concurrent use.
type Getter struct {
	ch *amqp.Channel
}

// Got is one message read by a Getter, not yet acknowledged.
type Got struct {
	// Message holds the body, the properties and the headers as received;
	// Exchange and RoutingKey are those of the last publish (for a
	// dead-lettered message: the dead-letter exchange).
	Message
	// Redelivered is set when the broker delivered it before.
	Redelivered bool
	// Remaining is how many messages were left in the queue after this one.
	Remaining int
	d         amqp.Delivery
}

// Ack removes the message from its queue.
func (g *Got) Ack() error { return g.d.Ack(false) }

// Requeue returns the message to its queue.
func (g *Got) Requeue() error { return g.d.Nack(false, true) }

// NewGetter opens a channel on conn.
func NewGetter(conn *amqp.Connection) (*Getter, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open get channel: %w", err)
	}
	return &Getter{ch: ch}, nil
}

// Close closes the channel; the broker requeues every message read and
// not acknowledged.
func (g *Getter) Close() error { return g.ch.Close() }

// Depth returns the number of ready messages in queue. A missing queue
// gives ErrNoQueue and closes the channel (the broker's 404), so the
// Getter is unusable afterwards.
func (g *Getter) Depth(queue string) (int, error) {
	q, err := g.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, fmt.Errorf("%w: %s", ErrNoQueue, queue)
		}
		return 0, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return q.Messages, nil
}

// Get reads the next message of queue without acknowledging it; ok is
// false when the queue is empty.
func (g *Getter) Get(queue string) (got *Got, ok bool, err error) {
	d, ok, err := g.ch.Get(queue, false)
	if err != nil {
		return nil, false, fmt.Errorf("get from %s: %w", queue, err)
	}
	if !ok {
		return nil, false, nil
	}
	return &Got{
		Message: Message{
			Exchange: d.Exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
			ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: map[string]any(d.Headers),
			Body: d.Body, Persistent: d.DeliveryMode == amqp.Persistent,
		},
		Redelivered: d.Redelivered, Remaining: int(d.MessageCount), d: d,
	}, true, nil
}

// LegacyOriginalRoutingKeyHeader is also read for the original routing
// key, for messages dead-lettered by other tools.
const LegacyOriginalRoutingKeyHeader = "x-original-routing-key"

// OriginalRoutingKey returns the routing key a dead-lettered message was
// first published with: the consumer's mailtype.HeaderOriginalRoutingKey
// header, else LegacyOriginalRoutingKeyHeader, else the first routing key
// of the newest x-death entry (what RabbitMQ records when it dead-letters
// by itself), else "".
func OriginalRoutingKey(h map[string]any) string {
	for _, k := range []string{mailtype.HeaderOriginalRoutingKey, LegacyOriginalRoutingKeyHeader} {
		if s, ok := h[k].(string); ok && s != "" {
			return s
		}
	}
	deaths, _ := h["x-death"].([]any)
	for _, d := range deaths {
		entry, ok := d.(amqp.Table)
		if !ok {
			continue
		}
		keys, _ := entry["routing-keys"].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// DeadLetterReason returns why a message was dead-lettered: the
// consumer's mailtype.HeaderErrorReason, else the reason of the newest
// x-death entry (e.g. "delivery_limit", "rejected"), else "".
func DeadLetterReason(h map[string]any) string {
	if s, ok := h[mailtype.HeaderErrorReason].(string); ok && s != "" {
		return s
	}
	deaths, _ := h["x-death"].([]any)
	if len(deaths) > 0 {
		if entry, ok := deaths[0].(amqp.Table); ok {
			if s, ok := entry["reason"].(string); ok {
				return s
			}
		}
	}
	return ""
}

// HeaderReplays counts how many times `mailsvc dlq replay` sent a message
// back to the input exchange.
const HeaderReplays = "x-mailsvc-replays"

// ReplayHeaders returns the headers a replayed message is published with:
// h without the dead-letter bookkeeping (x-death and the x-first-death-* /
// x-last-death-* headers, which RabbitMQ would otherwise use to detect a
// dead-letter cycle and drop the message, and the consumer's x-mailsvc-*
// error headers, set afresh if it dead-letters the message again), with
// HeaderReplays incremented. h is not modified.
func ReplayHeaders(h map[string]any) map[string]any {
	out := make(map[string]any, len(h)+1)
	for k, v := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") ||
			(strings.HasPrefix(k, "x-mailsvc-") && k != HeaderReplays) {
			continue
		}
		out[k] = v
	}
	out[HeaderReplays] = replays(h[HeaderReplays]) + 1
	return out
}

func replays(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case uint8:
		return int64(n)
	}
	return 0
}
