package consumer

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// deadLetterMessage is d republished to the dead-letter exchange with the
// reason in headers (mailtype.Header*): same body, properties and headers,
// same routing key (the dead-letter queue is bound with "#"), persistent,
// and mandatory so that an unbound dead-letter queue is an error, not a
// silent loss. The broker-managed x-delivery-count header is dropped. A
// message without a message_id gets a fresh one: the publisher matches
// basic.return by it.
func deadLetterMessage(d amqp.Delivery, e *mailtype.Error, exchange string, now time.Time) broker.Message {
	h := make(map[string]any, len(d.Headers)+7)
	for k, v := range d.Headers {
		h[k] = v
	}
	delete(h, "x-delivery-count")
	text := e.Error()
	if e.Err != nil {
		text = e.Err.Error()
	}
	h[mailtype.HeaderErrorClass] = string(e.Class)
	h[mailtype.HeaderErrorReason] = string(e.Reason)
	h[mailtype.HeaderError] = mailtype.Sanitize(text)
	h[mailtype.HeaderDeadLetteredAt] = now.UTC().Format(time.RFC3339Nano)
	h[mailtype.HeaderOriginalExchange] = d.Exchange
	h[mailtype.HeaderOriginalRoutingKey] = d.RoutingKey
	h[mailtype.HeaderRedelivered] = d.Redelivered
	// The copy keeps the original message_id, empty or not, so that a replay
	// after a fix passes the message_id = event_id check.
	return broker.Message{
		Exchange: exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId, Type: d.Type,
		ContentType: d.ContentType, Timestamp: d.Timestamp, Headers: h, Body: d.Body,
		Mandatory: true, Persistent: true,
	}
}
