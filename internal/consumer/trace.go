package consumer

import (
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// errNotAcked ends the span of a delivery whose connection ended before it
// was acked: the broker delivers it again, under a span of its own.
var errNotAcked = errors.New("not acknowledged: the connection ended; the broker redelivers it")

// traceFlight starts the process span of every delivery of f, from its
// receipt, as the child of the traceparent of its headers (a new trace
// without one), and stores the span's context with the item it records,
// so that the mail row and the outbox rows written for it carry it. It
// does nothing while tracing is off.
func (l *loop) traceFlight(f *flight) {
	t := l.c.tracer
	if !t.On() {
		return
	}
	f.spans = make([]trace.Span, len(f.batch))
	for i, d := range f.batch {
		ctx, span := t.StartProcess(tracing.Delivery{Queue: l.c.cfg.Queue, Exchange: d.Exchange, RoutingKey: d.RoutingKey,
			MessageID: d.MessageID, Redelivered: d.Redelivered, Received: d.Received, Headers: broker.HeaderCarrier(d.Headers)})
		f.spans[i] = span
		tc := tracing.Encode(ctx)
		if m := f.decisions[i].Item.Mail; m != nil {
			m.TraceContext = tc
		}
		if c := f.decisions[i].Item.Cancel; c != nil {
			c.TraceContext = tc
		}
	}
}

// endSpan ends the span of delivery i of f, once acked, with what became
// of it; a dead-lettered event ends in error with its reason.
func (f *flight) endSpan(i int, outcome mailtype.Disposition) {
	f.spanMu.Lock()
	defer f.spanMu.Unlock()
	if f.spans == nil || f.spans[i] == nil {
		return
	}
	span, d := f.spans[i], f.decisions[i]
	f.spans[i] = nil
	span.SetAttributes(tracing.EventTypeKey.String(d.EventType), tracing.OutcomeKey.String(string(outcome)))
	if m := d.Item.Mail; m != nil {
		span.SetAttributes(tracing.DedupeKeyKey.String(m.DedupeKey))
	}
	if outcome == mailtype.DispositionDeadLettered && d.Err != nil {
		span.SetAttributes(tracing.ErrorReasonKey.String(string(d.Err.Reason)))
		tracing.Fail(span, "dead-lettered: "+string(d.Err.Reason))
	}
	span.End()
}

// abandon ends the spans of f's deliveries that were not acked.
func (f *flight) abandon() {
	f.spanMu.Lock()
	defer f.spanMu.Unlock()
	for _, span := range f.spans {
		tracing.End(span, errNotAcked)
	}
	f.spans = nil
}

// abandonSome ends the spans of f's deliveries idx, not acked: held dead
// letters that go back to the queue when their hold ends (hold.go).
func (f *flight) abandonSome(idx []int) {
	f.spanMu.Lock()
	defer f.spanMu.Unlock()
	if f.spans == nil {
		return
	}
	for _, i := range idx {
		tracing.End(f.spans[i], errNotAcked)
		f.spans[i] = nil
	}
}
