// Package tracing owns mailsvc's OpenTelemetry tracing, in one place: the
// SDK's set-up (Setup: an exporter chosen by the standard OTEL_*
// environment variables, a batching span processor, the service resource),
// the W3C trace context (traceparent and tracestate, W3C Trace Context
// Level 1) carried by AMQP headers and by the trace_context columns of
// the mail and outbox tables, and the spans of the three hops: process
// (one input delivery, consumer), send (one provider call, sender) and
// publish (one feedback event, relay).
//
// A trace follows one mail: the consumer continues the traceparent of the
// input message (or starts a new trace when it has none) and stores its
// span's context with the mail row; the sender's span is that span's
// child and its context goes with the outbox rows the outcome writes; the
// relay's span is the child of that one and its context is the
// traceparent header of the published event.
//
// Tracing is off unless tracing.enabled is true. Off, a component's
// *Tracer is nil: it starts no span, reads and writes no trace context,
// and costs one nil check per message.
//
// Only this package imports the OpenTelemetry SDK and its exporters
// (.golangci.yml, depguard); components use the API (go.opentelemetry.io/otel/trace)
// through the helpers here.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name resource attribute unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const ServiceName = "mailsvc"

// ErrConfig is wrapped by Setup's errors about a variable the SDK refuses:
// the configuration is invalid (`mailsvc serve` exits 2).
var ErrConfig = errors.New("invalid tracing configuration")

// Options configures Setup.
type Options struct {
	// Enabled turns tracing on (tracing.enabled). Off, Setup builds nothing
	// and every Tracer of the Provider is nil.
	Enabled bool
	// Version is the service.version resource attribute (buildinfo.Version).
	Version string
	// Log receives the SDK's errors (an export that failed, a bad
	// OTEL_TRACES_SAMPLER) as warnings; nil leaves the SDK's default
	// (the standard logger).
	Log *slog.Logger
}

// Provider is the process's tracer provider. Its zero value, and the one
// Setup returns while tracing is off, is off.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Setup builds the tracer provider of `mailsvc serve`. With o.Enabled
// false, or OTEL_SDK_DISABLED=true (the specification's switch), it
// returns an off Provider and touches nothing else.
//
// On, everything else comes from the standard variables
// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/),
// read by the SDK itself: the exporter is OTEL_TRACES_EXPORTER (otlp, the
// default; console; none), its protocol OTEL_EXPORTER_OTLP_PROTOCOL or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (http/protobuf, the default, or
// grpc), its address OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (default http://localhost:4318, or
// localhost:4317 for grpc), with OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT and
// the _CERTIFICATE variables; the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on); the batch
// OTEL_BSP_*; the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// Nothing is dialled here: the exporter connects when it first exports.
//
// It returns an error wrapping ErrConfig and naming the variable when one
// holds a value the SDK refuses (an unknown exporter or protocol). Setup also installs o.Log as
// the SDK's global error handler.
func Setup(ctx context.Context, o Options) (*Provider, error) {
	if !o.Enabled || strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return &Provider{}, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: tracing.enabled: span exporter (OTEL_TRACES_EXPORTER=%q, OTEL_EXPORTER_OTLP_PROTOCOL=%q, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=%q): %w",
			ErrConfig, os.Getenv("OTEL_TRACES_EXPORTER"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(o.Version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: tracing.enabled: resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", ErrConfig, err)
	}
	if o.Log != nil {
		log := o.Log.With("component", "tracing")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "error", err) }))
	}
	return &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// On reports whether tracing is on.
func (p *Provider) On() bool { return p != nil && p.tp != nil }

// Tracer returns the tracer of component ("consumer", "sender", "relay"),
// nil when tracing is off.
func (p *Provider) Tracer(component string) *Tracer {
	if !p.On() {
		return nil
	}
	return NewTracer(p.tp, component)
}

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx. It is a no-op when tracing is off, and safe to call twice.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	err := p.tp.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("tracing: spans not exported before the deadline: %w", err)
	}
	return err
}

// Tracer starts the spans of one component. A nil *Tracer is off: On
// reports false, and its callers start no span and store no trace
// context. It is safe for concurrent use.
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns the tracer of component from tp, any OpenTelemetry
// tracer provider (Setup's, or a test's with an in-memory exporter).
func NewTracer(tp trace.TracerProvider, component string) *Tracer {
	return &Tracer{t: tp.Tracer("github.com/mailsvc/mailsvc/internal/" + component)}
}

// On reports whether t starts spans (t is not nil).
func (t *Tracer) On() bool { return t != nil }
