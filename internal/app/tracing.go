package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/mailsvc/mailsvc/internal/buildinfo"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// setupTracing builds the tracer provider (tracing.enabled, then the
// standard OTEL_* variables; docs/operating.md, "Tracing"). Off, every component's
// tracer is nil. A variable the SDK refuses is an error wrapping
// tracing.ErrConfig (exit code 2).
func setupTracing(ctx context.Context, cfg *config.Config, log *slog.Logger) (*tracing.Provider, error) {
	p, err := tracing.Setup(ctx, tracing.Options{Enabled: cfg.Tracing.Enabled, Version: buildinfo.Version, Log: log})
	if err != nil {
		return nil, err
	}
	if p.On() {
		log.Info("tracing on: spans are exported as the OTEL_* environment variables say")
	}
	return p, nil
}

// shutdownTracing flushes and stops p within componentStopBudget. After a
// stop of the relay (flushAfter) it has nothing left to do; it matters
// when serve ends before the relay ran.
func shutdownTracing(p *tracing.Provider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), componentStopBudget)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		log.Warn("tracing: shutdown", "error", err)
	}
}

// flushAfter is a component that, once stopped, exports the spans the
// tracer provider still buffers and stops its exporter, within the same
// Stop budget. It wraps the relay, the last component to make spans (its
// publish spans), so that the flush needs no time of its own beyond the
// last stop stage and app.ShutdownBound holds with tracing on.
type flushAfter struct {
	Component
	tracing *tracing.Provider
}

// Stop stops the wrapped component, then flushes the spans with what is
// left of ctx; it returns both errors.
func (f flushAfter) Stop(ctx context.Context) error {
	err := f.Component.Stop(ctx)
	return errors.Join(err, f.tracing.Shutdown(ctx))
}

// withTracingFlush wraps c in a flushAfter while tracing is on.
func (w *wiring) withTracingFlush(c Component) Component {
	if !w.tracing.On() {
		return c
	}
	return flushAfter{Component: c, tracing: w.tracing}
}

// spanFlush is the component that, in a process without the relay role,
// exports the buffered spans and stops the exporter in the last stop stage
// (stopLast): the consumer and the sender, which make the spans, stopped
// in the first one. Like flushAfter, it keeps the flush within
// app.ShutdownBound.
type spanFlush struct {
	tracing *tracing.Provider
	life    lifecycle.Life
}

// Start waits for Stop.
func (f *spanFlush) Start(ctx context.Context) error {
	return f.life.Start(ctx, func(stop, abort context.Context) error {
		<-stop.Done()
		return f.tracing.Shutdown(abort)
	})
}

// Stop flushes the spans within ctx.
func (f *spanFlush) Stop(ctx context.Context) error { return f.life.Stop(ctx) }

// Done is closed once the flush has run.
func (f *spanFlush) Done() <-chan struct{} { return f.life.Done() }

// Err is what the flush returned.
func (f *spanFlush) Err() error { return f.life.Err() }

// spanFlushPart is the "tracing" part of a process without the relay role
// while tracing is on (with the relay, flushAfter flushes); ok is false
// otherwise.
func (w *wiring) spanFlushPart() (named, bool) {
	if !w.tracing.On() || w.cfg.Serve.HasRole(config.RoleRelay) {
		return named{}, false
	}
	return named{name: "tracing", c: &spanFlush{tracing: w.tracing}, stage: stopLast}, true
}
