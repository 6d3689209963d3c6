package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/tracing"
	"github.com/mailsvc/mailsvc/internal/tracing/tracingtest"
)

const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + parentTrace + "-" + parentSpan + "-01"
)

// memTracer is a tracer whose spans end up in the returned exporter.
func memTracer(t *testing.T) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.NewTracer(tp, "test"), exp
}

// Off (the default), Setup builds nothing: no tracer, Shutdown is a no-op.
func TestSetupOffBuildsNothing(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "no-such-exporter") // never read while off
	p, err := tracing.Setup(context.Background(), tracing.Options{})
	require.NoError(t, err)
	require.False(t, p.On())
	require.Nil(t, p.Tracer("consumer"))
	require.False(t, p.Tracer("consumer").On())
	require.NoError(t, p.Shutdown(context.Background()))
	var nilProvider *tracing.Provider
	require.False(t, nilProvider.On())
	require.NoError(t, nilProvider.Shutdown(context.Background()))
}

// OTEL_SDK_DISABLED=true wins over tracing.enabled, as the specification
// says.
func TestSetupHonoursSDKDisabled(t *testing.T) {
	t.Setenv("OTEL_SDK_DISABLED", "TRUE")
	p, err := tracing.Setup(context.Background(), tracing.Options{Enabled: true})
	require.NoError(t, err)
	require.False(t, p.On())
}

// A value the SDK refuses is an error at start that names the variables.
func TestSetupRefusesABadExporterNamingTheVariable(t *testing.T) {
	for name, env := range map[string][2]string{
		"exporter": {"OTEL_TRACES_EXPORTER", "zipkin-please"},
		"protocol": {"OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(env[0], env[1])
			_, err := tracing.Setup(context.Background(), tracing.Options{Enabled: true})
			require.ErrorIs(t, err, tracing.ErrConfig)
			require.Contains(t, err.Error(), "tracing.enabled")
			require.Contains(t, err.Error(), env[0]+`="`+env[1]+`"`)
		})
	}
}

// On, the spans go out over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT,
// with service.name from OTEL_SERVICE_NAME and the version given; the
// sampler is OTEL_TRACES_SAMPLER's (always_off: the trace context still
// propagates, nothing is exported).
func TestSetupExportsOverOTLPHTTPAsTheEnvironmentSays(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "mailsvc-test")
	p, err := tracing.Setup(context.Background(), tracing.Options{Enabled: true, Version: "v9.9.9"})
	require.NoError(t, err)
	require.True(t, p.On())
	ctx, span := p.Tracer("consumer").StartProcess(tracing.Delivery{Queue: "q", MessageID: "m1", Received: time.Now(),
		Headers: propagation.MapCarrier{"traceparent": traceparent}})
	require.Equal(t, parentTrace, trace.SpanContextFromContext(ctx).TraceID().String())
	span.End()
	require.NoError(t, p.Shutdown(context.Background()), "flushes the batch")
	got := rcv.WaitTrace(t, parentTrace, 1)
	require.Len(t, got, 1)
	require.Equal(t, "process q", got[0].Name)
	require.Equal(t, parentSpan, got[0].ParentSpanID)
	require.Equal(t, "SPAN_KIND_CONSUMER", got[0].Kind)
	require.Equal(t, "mailsvc-test", got[0].Resource["service.name"])
	require.Equal(t, "v9.9.9", got[0].Resource["service.version"])
	require.Equal(t, "m1", got[0].Attributes["messaging.message.id"])
	require.Equal(t, "rabbitmq", got[0].Attributes["messaging.system"])

	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	p, err = tracing.Setup(context.Background(), tracing.Options{Enabled: true})
	require.NoError(t, err)
	ctx, span = p.Tracer("consumer").StartProcess(tracing.Delivery{Queue: "q", Received: time.Now(), Headers: propagation.MapCarrier{}})
	require.False(t, span.IsRecording())
	stored := tracing.Encode(ctx)
	require.Regexp(t, `^\{"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-00"\}$`, stored, "not sampled, still propagated")
	span.End()
	require.NoError(t, p.Shutdown(context.Background()))
	require.Len(t, rcv.Spans(), 1, "nothing more exported")
}

// The stored form keeps traceparent and tracestate; what is not a stored
// trace context decodes to none.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	require.Empty(t, tracing.Encode(context.Background()), "no span context: nothing stored")
	in := propagation.MapCarrier{"traceparent": traceparent, "tracestate": "vendor=x,other=y"}
	ctx := tracing.Extract(context.Background(), in)
	stored := tracing.Encode(ctx)
	require.JSONEq(t, `{"traceparent":"`+traceparent+`","tracestate":"vendor=x,other=y"}`, stored)
	sc := trace.SpanContextFromContext(tracing.Decode(context.Background(), stored))
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.Equal(t, parentTrace, sc.TraceID().String())
	require.Equal(t, parentSpan, sc.SpanID().String())
	require.Equal(t, "vendor=x,other=y", sc.TraceState().String())
	for _, bad := range []string{"", "null", "{", `{"traceparent":"00-zz-00f067aa0ba902b7-01"}`, `"x"`} {
		require.False(t, trace.SpanContextFromContext(tracing.Decode(context.Background(), bad)).IsValid(), bad)
	}
}

// The three hops chain: process continues the input's traceparent (or
// starts a new trace), send is its child through the stored form, publish
// is the child of send and writes its own traceparent into the headers.
func TestHopsChainThroughTheStoredForm(t *testing.T) {
	t.Parallel()
	tr, exp := memTracer(t)
	for name, headers := range map[string]propagation.MapCarrier{
		"continued": {"traceparent": traceparent, "tracestate": "vendor=x"},
		"new trace": {},
		"malformed": {"traceparent": "00-not-a-trace-01"},
	} {
		t.Run(name, func(t *testing.T) {
			exp.Reset()
			ctx, process := tr.StartProcess(tracing.Delivery{Queue: "mail.order-events", RoutingKey: "order.confirmed", Received: time.Now(), Headers: headers})
			row := tracing.Encode(ctx)
			process.End()
			sendCtx, send := tr.StartSend(row, "smtp", "order-confirmed:42", 1)
			outbox := tracing.Encode(sendCtx)
			send.End()
			out := propagation.MapCarrier{}
			publish := tr.StartPublish(tracing.Message{Exchange: "mail.events", RoutingKey: "email.sent", EventType: "EmailSent",
				TraceContext: outbox, Headers: out})
			tracing.End(publish, nil)

			spans := exp.GetSpans()
			require.Len(t, spans, 3)
			p, s, pub := spans[0], spans[1], spans[2]
			require.Equal(t, []string{"process mail.order-events", "send smtp", "publish mail.events"}, []string{p.Name, s.Name, pub.Name})
			require.Equal(t, []trace.SpanKind{trace.SpanKindConsumer, trace.SpanKindClient, trace.SpanKindProducer},
				[]trace.SpanKind{p.SpanKind, s.SpanKind, pub.SpanKind})
			id := p.SpanContext.TraceID()
			require.True(t, id.IsValid())
			if name == "continued" {
				require.Equal(t, parentTrace, id.String())
				require.Equal(t, parentSpan, p.Parent.SpanID().String())
				require.Equal(t, "vendor=x", out.Get("tracestate"), "tracestate travels with the trace")
			} else {
				require.NotEqual(t, parentTrace, id.String())
				require.False(t, p.Parent.IsValid(), "a new trace: process is its root")
			}
			require.Equal(t, p.SpanContext.SpanID(), s.Parent.SpanID(), "send is the child of process")
			require.Equal(t, s.SpanContext.SpanID(), pub.Parent.SpanID(), "publish is the child of send")
			require.Equal(t, id, s.SpanContext.TraceID())
			require.Equal(t, id, pub.SpanContext.TraceID())
			require.Equal(t, "00-"+id.String()+"-"+pub.SpanContext.SpanID().String()+"-01", out.Get("traceparent"))
		})
	}
}

// End records an error as the span's status.
func TestEndRecordsTheError(t *testing.T) {
	t.Parallel()
	tr, exp := memTracer(t)
	span := tr.StartPublish(tracing.Message{Exchange: "x", Headers: propagation.MapCarrier{}})
	tracing.End(span, errString("broker nacked the publish"))
	tracing.End(nil, nil) // ignored
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "broker nacked the publish", spans[0].Status.Description)
	require.True(t, strings.HasPrefix(spans[0].Status.Code.String(), "Error"))
}

type errString string

func (e errString) Error() string { return string(e) }
