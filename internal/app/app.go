// Package app wires mailsvc's components for `mailsvc serve`: it opens the
// store, checks the schema, starts the HTTP server and the long-lived loops,
// and stops them last-in-first-out within a deadline when the context ends.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// Component is a long-lived part of the daemon. Start returns once the part
// runs in the background; Stop is idempotent, bounded by ctx, and safe to
// call without Start.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// named pairs a component with the name used in logs.
type named struct {
	name string
	c    Component
}

// Serve runs the daemon until ctx is cancelled or a component fails. It
// refuses to start when the schema is behind (store.ErrSchemaBehind).
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	st, err := store.Open(ctx, store.Options{URL: cfg.Database.URL.Reveal(), MaxConns: cfg.Database.MaxConns, EventsExchange: cfg.AMQP.EventsExchange})
	if err != nil {
		return fmt.Errorf("connect to database %s: %w", cfg.Database.URL, err)
	}
	defer st.Close()
	if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	w := &wiring{cfg: cfg, log: log, store: st, reg: reg, fatal: make(chan error, 8)}
	parts, err := w.build()
	if err != nil {
		return err
	}
	return run(ctx, log, parts, w.fatal, cfg.Sender.ShutdownTimeout+5*time.Second)
}

// wiring holds what components are built from.
type wiring struct {
	cfg   *config.Config
	log   *slog.Logger
	store *store.Store
	reg   prometheus.Registerer
	// fatal receives errors that must stop the process cleanly.
	fatal chan error
	// ready lists the readiness checks /readyz runs.
	ready []ReadyCheck
	// brokerMetrics is shared by every AMQP connection (mailsvc_amqp_connected).
	brokerMetrics *broker.Metrics
	// templates renders mails; built once.
	templates *templates.Registry
	// wakeSender and wakeRelay signal, in process, that the consumer wrote a
	// mail row or that anyone wrote an outbox row; no-ops until the sender
	// and the relay are wired.
	wakeSender func()
	wakeRelay  func()
}

// build constructs every component in start order.
func (w *wiring) build() ([]named, error) {
	w.ready = append(w.ready,
		ReadyCheck{Name: "database", Check: w.store.Ping},
		ReadyCheck{Name: "schema", Check: w.store.CheckSchema},
	)
	w.brokerMetrics = broker.NewMetrics(w.reg)
	w.wakeSender, w.wakeRelay = func() {}, func() {}
	tmpl, err := templates.New(templates.Options{Dir: w.cfg.Templates.Dir, DefaultLocale: w.cfg.Templates.DefaultLocale, TimeZone: w.cfg.Templates.TimeZone})
	if err != nil {
		return nil, fmt.Errorf("load templates: %w", err)
	}
	w.templates = tmpl
	// Start order: http first (probes answer during start-up), then the
	// relay, the sender and the consumer last; stop runs in reverse, so the
	// consumer stops taking deliveries first and the relay flushes last.
	parts := []named{{"http", newHTTPServer(w.cfg.HTTP.Addr, w.reg.(prometheus.Gatherer), &w.ready, w.log)}}
	// relay (issue 5): one active relay across replicas (lease row).
	rel, err := relay.New(relay.FromConfig(w.cfg), w.store, w.log, relay.NewMetrics(w.reg), w.brokerMetrics)
	if err != nil {
		return nil, fmt.Errorf("build relay: %w", err)
	}
	parts = append(parts, named{"relay", rel})
	w.wakeRelay = rel.Wake
	// sender (issue 4): workers sending through sender.provider, and the janitor.
	senderParts, err := w.buildSender()
	if err != nil {
		return nil, err
	}
	parts = append(parts, senderParts...)
	// consumer (issue 3): after the relay and the sender, so it stops before them.
	cons, err := consumer.New(consumer.FromConfig(w.cfg), consumer.Options{
		Store: w.store, Templates: w.templates, Log: w.log, Registerer: w.reg, BrokerMetrics: w.brokerMetrics,
		OnMailInserted: func() { w.wakeSender() }, OnOutboxWritten: func() { w.wakeRelay() },
	})
	if err != nil {
		return nil, fmt.Errorf("build consumer: %w", err)
	}
	parts = append(parts, named{"consumer", cons})
	w.ready = append(w.ready, ReadyCheck{Name: "broker", Check: cons.Ready})
	// stats (issue 7): the database gauges, from one query every 5 s.
	parts = append(parts, named{"stats", stats.New(w.store, stats.NewMetrics(w.reg), w.log, stats.Options{})})
	return parts, nil
}

// run starts parts in order, waits for ctx or a fatal error, then stops
// them in reverse order within stopTimeout.
func run(ctx context.Context, log *slog.Logger, parts []named, fatal <-chan error, stopTimeout time.Duration) error {
	var started []named
	var runErr error
	for _, p := range parts {
		if err := p.c.Start(ctx); err != nil {
			runErr = fmt.Errorf("start %s: %w", p.name, err)
			break
		}
		started = append(started, p)
	}
	if runErr == nil {
		log.Info("mailsvc serving")
		select {
		case <-ctx.Done():
		case err := <-fatal:
			runErr = err
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	for i := len(started) - 1; i >= 0; i-- {
		if err := started[i].c.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("stop component", "component", started[i].name, "error", err)
		}
	}
	log.Info("mailsvc stopped")
	return runErr
}

// buildSender builds the sender pool on the provider of sender.provider,
// and the janitor; it sets w.wakeSender.
func (w *wiring) buildSender() ([]named, error) {
	var prov sender.Provider
	var err error
	if w.cfg.Sender.Provider == "resend" {
		prov, err = resend.New(resend.ConfigFrom(w.cfg))
	} else {
		prov, err = smtp.New(smtp.ConfigFrom(w.cfg))
	}
	if err != nil {
		return nil, fmt.Errorf("build sender provider: %w", err)
	}
	pool, err := sender.New(sender.ConfigFrom(w.cfg), sender.Deps{Store: w.store, Provider: prov,
		Metrics: sender.NewMetrics(w.reg), Log: w.log, Templates: w.templates, OnOutboxWritten: func() { w.wakeRelay() }})
	if err != nil {
		return nil, fmt.Errorf("build sender: %w", err)
	}
	jan, err := sender.NewJanitor(sender.JanitorConfigFrom(w.cfg), w.store, w.log, func() { w.wakeRelay() })
	if err != nil {
		return nil, fmt.Errorf("build janitor: %w", err)
	}
	w.wakeSender = pool.Wake
	return []named{{"sender", pool}, {"janitor", jan}}, nil
}
