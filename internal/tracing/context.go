package tracing

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/propagation"
)

// The header names of W3C Trace Context Level 1 (https://www.w3.org/TR/trace-context/),
// the AMQP headers mailsvc reads on input messages and writes on feedback
// events.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// propagator is the W3C Trace Context propagator: traceparent and
// tracestate, nothing else (no baggage).
var propagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context that carrier's
// traceparent and tracestate describe; ctx unchanged when there is none or
// it is malformed (then the next span starts a new trace).
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, carrier)
}

// Inject writes the span context of ctx into carrier as traceparent (and
// tracestate when it has one); nothing when ctx has no valid span context.
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	propagator.Inject(ctx, carrier)
}

// Encode returns the stored form of the span context of ctx, the value
// of the trace_context columns of mail and outbox: a JSON object of the
// W3C headers, {"traceparent":"00-<trace id>-<span id>-<flags>"} with
// "tracestate" when there is one. It returns "" when ctx carries no valid
// span context.
func Encode(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	if len(c) == 0 {
		return ""
	}
	b, err := json.Marshal(map[string]string(c))
	if err != nil {
		return ""
	}
	return string(b)
}

// Decode returns ctx with the remote span context of stored (Encode's
// form) as the parent of the next span; ctx unchanged when stored is ""
// or not a trace context (the next span then starts a new trace).
func Decode(ctx context.Context, stored string) context.Context {
	if stored == "" {
		return ctx
	}
	var c map[string]string
	if err := json.Unmarshal([]byte(stored), &c); err != nil {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(c))
}
