package deadletter

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Letter is a delivery to dead-letter and why.
type Letter struct {
	Delivery broker.Delivery
	Err      *mailtype.Error
}

// Message is d republished to the dead-letter exchange with the reason e
// in headers (Header*): same body, properties and headers, same routing
// key (the dead-letter queue is bound with BindingKey), persistent, and
// mandatory so that an unbound dead-letter queue is an error, not a
// silent loss. The broker-managed x-delivery-count header is dropped.
func Message(d broker.Delivery, e *mailtype.Error, exchange string, now time.Time) broker.Message {
	h := make(map[string]any, len(d.Headers)+7)
	for k, v := range d.Headers {
		h[k] = v
	}
	delete(h, "x-delivery-count")
	text := e.Error()
	if e.Err != nil {
		text = e.Err.Error()
	}
	h[HeaderErrorClass] = string(e.Class)
	h[HeaderErrorReason] = string(e.Reason)
	h[HeaderError] = mailtype.Sanitize(text)
	h[HeaderDeadLetteredAt] = now.UTC().Format(time.RFC3339Nano)
	h[HeaderOriginalExchange] = d.Exchange
	h[HeaderOriginalRoutingKey] = d.RoutingKey
	h[HeaderRedelivered] = d.Redelivered
	// The copy keeps the original message_id, empty or not, so that a replay
	// after a fix passes the message_id = event_id check.
	return broker.Message{
		Exchange: exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageID, Type: d.Type,
		ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: h, Body: d.Body,
		Mandatory: true, Persistent: true,
	}
}

// Publish publishes the Message of each letter to exchange through pub
// (confirm mode) and waits for the confirms until ctx is done. It returns
// one error per letter, nil only for a confirmed, routed publish (see
// broker.Publisher.PublishBatch). At most broker.MaxBatch letters.
func Publish(ctx context.Context, pub *broker.Publisher, exchange string, letters []Letter) []error {
	now := time.Now()
	msgs := make([]broker.Message, len(letters))
	for i, l := range letters {
		msgs[i] = Message(l.Delivery, l.Err, exchange, now)
	}
	return pub.PublishBatch(ctx, msgs)
}
