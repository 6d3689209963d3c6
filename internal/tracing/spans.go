package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The operations that start span names, after OpenTelemetry's messaging
// conventions ("{operation} {destination}"): "process mail.order-events",
// "send smtp", "publish mail.events".
const (
	// OpProcess: the consumer's span of one input delivery, from its
	// receipt to its ack (kind consumer); "process <queue>".
	OpProcess = "process"
	// OpSend: the sender's span of one provider call (kind client);
	// "send <provider>".
	OpSend = "send"
	// OpPublish: the relay's span of one publish of a feedback event, up
	// to its publisher confirm (kind producer); "publish <exchange>".
	OpPublish = "publish"
)

// mailsvc's own span attributes; their values are those of the matching
// columns and metric labels (internal/mailtype).
const (
	// EventTypeKey: the event type (OrderConfirmed, EmailSent, ...).
	EventTypeKey = attribute.Key("mailsvc.event_type")
	// DedupeKeyKey: the mail's dedupe key.
	DedupeKeyKey = attribute.Key("mailsvc.dedupe_key")
	// OutcomeKey: what the consumer did with an event (inserted,
	// duplicate, dead_lettered, ...).
	OutcomeKey = attribute.Key("mailsvc.outcome")
	// StatusKey: the mail status a send led to (sent, pending, failed,
	// unknown, cancelled).
	StatusKey = attribute.Key("mailsvc.status")
	// AttemptKey: the number of this send among the mail's sends (1 for
	// the first).
	AttemptKey = attribute.Key("mailsvc.attempt")
	// ErrorReasonKey: the mailtype reason of a failure.
	ErrorReasonKey = attribute.Key("mailsvc.error_reason")
)

// Delivery describes an input delivery to StartProcess.
type Delivery struct {
	// Queue is the queue it was consumed from; Exchange and RoutingKey
	// those it was published with.
	Queue, Exchange, RoutingKey string
	// MessageID is its AMQP message_id (the event id).
	MessageID string
	// Redelivered is the broker's redelivered flag.
	Redelivered bool
	// Received is when it arrived: the span's start.
	Received time.Time
	// Headers carries its AMQP headers (broker.HeaderCarrier).
	Headers propagation.TextMapCarrier
}

// StartProcess starts the span of one input delivery, "process <queue>",
// as the child of the traceparent in its headers, or as the root of a new
// trace when it has none (or a malformed one). The caller ends it once the
// delivery is acked (End) and stores Encode(ctx) with what it records.
func (t *Tracer) StartProcess(d Delivery) (context.Context, trace.Span) {
	ctx := Extract(context.Background(), d.Headers)
	return t.t.Start(ctx, OpProcess+" "+d.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(d.Received),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName(OpProcess), semconv.MessagingDestinationName(d.Queue),
			semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey), semconv.MessagingMessageID(d.MessageID),
			attribute.String("messaging.rabbitmq.exchange", d.Exchange),
			attribute.Bool("messaging.rabbitmq.redelivered", d.Redelivered)))
}

// StartSend starts the span of one provider call of the mail keyed
// dedupeKey, "send <provider>", as the child of stored (the mail row's
// trace_context), or as the root of a new trace when stored is "" (a row
// written while tracing was off). The caller stores Encode(ctx) with the
// outcome, so that the feedback events continue the trace.
func (t *Tracer) StartSend(stored, provider, dedupeKey string, attempt int) (context.Context, trace.Span) {
	ctx := Decode(context.Background(), stored)
	return t.t.Start(ctx, OpSend+" "+provider, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(DedupeKeyKey.String(dedupeKey), AttemptKey.Int(attempt),
			attribute.String("mailsvc.provider", provider)))
}

// Message describes a feedback event to StartPublish.
type Message struct {
	// Exchange, RoutingKey, MessageID (the event id) and EventType are
	// those it is published with.
	Exchange, RoutingKey, MessageID, EventType string
	// DedupeKey is the key of the mail it reports ("" if none).
	DedupeKey string
	// TraceContext is the outbox row's trace_context ("" for none).
	TraceContext string
	// Headers carries the message's AMQP headers (broker.HeaderCarrier);
	// StartPublish writes the new span's traceparent into it.
	Headers propagation.TextMapCarrier
}

// StartPublish starts the span of one publish of a feedback event,
// "publish <exchange>", as the child of m.TraceContext (the span of the
// send or of the delivery that wrote the row), or as the root of a new
// trace when the row has none, and writes the span's traceparent (and
// tracestate) into m.Headers. The caller ends it once the broker
// confirmed or refused the publish (End).
func (t *Tracer) StartPublish(m Message) trace.Span {
	ctx := Decode(context.Background(), m.TraceContext)
	ctx, span := t.t.Start(ctx, OpPublish+" "+m.Exchange, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName(OpPublish), semconv.MessagingDestinationName(m.Exchange),
			semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey), semconv.MessagingMessageID(m.MessageID),
			EventTypeKey.String(m.EventType), DedupeKeyKey.String(m.DedupeKey)))
	Inject(ctx, m.Headers)
	return span
}

// End ends span; with a non-nil err its status is Error with err's text,
// which must hold no secret or address (mailtype.Sanitize). A nil span is
// ignored.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Fail sets span's status to Error with description (sanitized, like
// End's err) without ending it.
func Fail(span trace.Span, description string) {
	span.SetStatus(codes.Error, description)
}
