package sender

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// startSend starts the span of the provider call of m, the child of the
// row's stored trace context, and returns sendCtx with it; nil span and
// sendCtx unchanged while tracing is off.
func (e *executor) startSend(sendCtx context.Context, m *store.ClaimedMail, provider string, st store.Started) (context.Context, trace.Span) {
	if !e.tracer.On() {
		return sendCtx, nil
	}
	_, span := e.tracer.StartSend(m.TraceContext, provider, m.DedupeKey, st.TotalSends)
	return trace.ContextWithSpan(sendCtx, span), span
}

// endSend ends span (nil: tracing off) with the verdict v and stores the
// span's context with the outcome, so that the feedback events it writes
// (and the relay's publish spans) continue the trace from this send.
func endSend(span trace.Span, v *verdict) {
	if span == nil {
		return
	}
	v.Record.TraceContext = tracing.Encode(trace.ContextWithSpan(context.Background(), span))
	span.SetAttributes(tracing.StatusKey.String(string(v.Record.Status)))
	var err error
	if v.Record.ErrorReason != "" {
		span.SetAttributes(tracing.ErrorReasonKey.String(string(v.Record.ErrorReason)))
		err = errors.New(string(v.Record.ErrorClass) + " " + string(v.Record.ErrorReason) + ": " + v.Record.Error)
	}
	tracing.End(span, err)
}
