package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// With tracing on, every delivery gets one process span, ended at its ack
// with its outcome: the child of its traceparent, or the root of a new
// trace. The mail row keeps the span's context; a poison message's span
// ends in error with its reason, and its dead-letter copy keeps the
// traceparent it came with.
func TestEveryDeliveryHasAProcessSpanEndedAtItsAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.tracer = tracing.NewTracer(tp, "consumer")
	r := b.start(t)

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := map[string]any{"traceparent": parent}
	ev, other := confirmedNow("300"), confirmedNow("301")
	msg := func(body []byte, headers map[string]any) broker.Message {
		return broker.Message{Exchange: b.names.InputExchange, RoutingKey: "order.confirmed", ContentType: "application/json",
			Body: body, Persistent: true, Mandatory: true, Headers: headers}
	}
	for i, err := range b.pub.PublishBatch(b.ctx, []broker.Message{
		msg(body(t, ev), traced), msg(body(t, ev), traced), msg(body(t, other), nil), msg([]byte(`not json`), traced),
	}) {
		require.NoError(t, err, i)
	}
	r.waitConsumed(t, 4)
	require.Eventually(t, func() bool { return len(exp.GetSpans()) >= 4 }, waitFor, tick, "4 spans ended")
	spans := exp.GetSpans()
	require.Len(t, spans, 4)

	outcomes := map[string]int{}
	for _, s := range spans {
		require.Equal(t, "process "+b.names.Queue, s.Name)
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		outcome := ""
		for _, a := range s.Attributes {
			if a.Key == tracing.OutcomeKey {
				outcome = a.Value.AsString()
			}
		}
		outcomes[outcome]++
		if outcome == "inserted" && s.Parent.IsValid() {
			outcome = "inserted traced"
		}
		switch outcome {
		case "inserted traced", "duplicate", "dead_lettered":
			require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext.TraceID().String(), outcome)
			require.Equal(t, "00f067aa0ba902b7", s.Parent.SpanID().String(), outcome)
		case "inserted":
			require.False(t, s.Parent.IsValid(), "no traceparent: the root of a new trace")
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:301'
				AND trace_context = $1`, tracing.Encode(trace.ContextWithSpanContext(context.Background(), s.SpanContext))))
		}
		if outcome == "dead_lettered" {
			require.Equal(t, "dead-lettered: malformed_json", s.Status.Description)
		} else {
			require.Empty(t, s.Status.Description, outcome)
		}
	}
	require.Equal(t, map[string]int{"inserted": 2, "duplicate": 1, "dead_lettered": 1}, outcomes)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:300'
		AND trace_context LIKE '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-%-01"}'
		AND trace_context NOT LIKE '%00f067aa0ba902b7%'`), "the row keeps the process span's context, not the producer's")
	dead := b.deadLetters(t)
	require.Len(t, dead, 1)
	require.Equal(t, parent, broker.HeaderCarrier(dead[0].Headers).Get("traceparent"))
}

// A held dead letter (hold.go) keeps its span open while it is held: the
// spans of the events behind it end at their acks, and a stop, which gives
// it back to the queue, ends it as not acknowledged. Its next delivery
// has a span of its own.
func TestAHeldDeadLettersSpanEndsAsNotAckedAtAStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxDeadLetterQueueLength = 2
	b.cfg.RetryBackoff, b.cfg.HoldBackoffMax = 10*time.Millisecond, 100*time.Millisecond
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.tracer = tracing.NewTracer(tp, "consumer")
	r := b.start(t)
	b.fillDeadLetterQueue(t)

	b.publish(t, "order.confirmed", []byte(`not json`))
	b.publish(t, "order.confirmed", confirmations(t, 1, 3)...)
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letters_held") == 1 }, waitFor, tick, "held")
	require.Eventually(t, func() bool { return r.consumed(t, "OrderConfirmed", "inserted") == 3 }, waitFor, tick, "the rest acked")
	require.Eventually(t, func() bool { return r.metric(t, "mailsvc_dead_letter_refusals_total") >= 3 }, waitFor, tick, "retried")
	spans := exp.GetSpans()
	require.Len(t, spans, 3, "the held one's span is still open")
	for _, s := range spans {
		require.Equal(t, "inserted", spanOutcome(s))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.c.Stop(ctx))
	spans = exp.GetSpans()
	require.Len(t, spans, 4)
	held := spans[3]
	require.Empty(t, spanOutcome(held))
	require.Equal(t, codes.Error, held.Status.Code)
	require.Contains(t, held.Status.Description, "not acknowledged")
	require.Equal(t, 1, b.queueDepth(t, b.names.Queue), "back in the queue")
}

// spanOutcome is the mailsvc.outcome attribute of s, "" without one.
func spanOutcome(s tracetest.SpanStub) string {
	for _, a := range s.Attributes {
		if a.Key == tracing.OutcomeKey {
			return a.Value.AsString()
		}
	}
	return ""
}
