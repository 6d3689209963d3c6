package app

import (
	"context"
	"errors"

	"github.com/mailsvc/mailsvc/internal/buildinfo"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// setupTracing builds the tracer provider (tracing.enabled, then the
// standard OTEL_* variables; README, "Tracing"). Off, every component's
// tracer is nil.
func (w *wiring) setupTracing(ctx context.Context) error {
	p, err := tracing.Setup(ctx, tracing.Options{Enabled: w.cfg.Tracing.Enabled, Version: buildinfo.Version, Log: w.log})
	if err != nil {
		return err
	}
	w.tracing = p
	if p.On() {
		w.log.Info("tracing on: spans are exported as the OTEL_* environment variables say")
	}
	return nil
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
