// Package app wires mailsvc's components for `mailsvc serve`: it opens the
// store, checks the schema, starts the HTTP server and the long-lived loops,
// and, when the context ends or a component fails, stops them in stages,
// each component within a budget of its own (stop.go).
package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mailsvc/mailsvc/internal/bounce"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/queuestats"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
	"github.com/mailsvc/mailsvc/internal/tracing"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

// Component is a long-lived part of the daemon, by the rules of
// internal/lifecycle: Start returns once the part runs in the background
// (a second Start is lifecycle.ErrStarted); Stop is idempotent, bounded by
// ctx, and safe to call without Start. Done is closed once the part has
// stopped: before Stop, that is a failure, Err says which, and it stops
// the daemon (run).
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

// named pairs a component with the name used in logs and how it stops
// (stop.go): in which stage, within which budget.
type named struct {
	name  string
	c     Component
	stage stopStage
	// budget bounds the component's Stop; 0 means componentStopBudget.
	budget time.Duration
}

// Serve runs the daemon, the roles of serve.roles, until ctx is cancelled
// or a component fails, then stops it (stop.go) and returns within
// ShutdownBound(cfg): nil after a stop on ctx, the component's error after
// a failure. It refuses to start when the schema is behind
// (store.ErrSchemaBehind), and behind a transaction pooler that loses
// prepared statements (store.ErrTransactionPooling, checkPooling).
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	gogc, ignored := applyGCDefault()
	if ignored != "" {
		log.Warn("GOGC is neither a number nor off: the Go runtime ignores it and collects at its default target", "GOGC", ignored, "gogc", gogc)
	}
	logCertificates(cfg, log, time.Now())
	tp, err := setupTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer shutdownTracing(tp, log)
	w, err := open(ctx, cfg, log, cfg.Database.MaxConns)
	if err != nil {
		return err
	}
	w.tracing = tp
	defer closeStore(w.store, log)
	if err := checkPooling(ctx, w.store, cfg, log); err != nil {
		return err
	}
	if err := w.store.CheckSchema(ctx); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(dbCountCollectors()...)
	w.reg = reg
	if err := w.resolveNamespace(ctx); err != nil {
		return err
	}
	parts, err := w.build()
	if err != nil {
		return err
	}
	log.Info("mailsvc starting", "roles", strings.Join(cfg.Serve.Roles, ","), "gogc", gogc, "gomemlimit", memoryLimit())
	return run(ctx, log, parts)
}

// UnavailableError is what Serve returns when the database cannot be
// reached at start (refused, unreachable, a TLS refusal): the command line
// exits 5 for it, as for every command that cannot reach a server.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// certificateWarning is how long before its expiry a certificate the
// config reads is logged as a warning at start.
const certificateWarning = 30 * 24 * time.Hour

// logCertificates logs each certificate the config read at Load (key,
// file, subject, expiry; never a key), as a warning when it expires within
// certificateWarning or has expired.
func logCertificates(cfg *config.Config, log *slog.Logger, now time.Time) {
	for _, c := range cfg.Certificates() {
		lvl, msg := slog.LevelInfo, "tls certificate"
		if c.NotAfter.Sub(now) < certificateWarning {
			lvl, msg = slog.LevelWarn, "tls certificate expires soon: renew it"
		}
		log.Log(context.Background(), lvl, msg, "key", c.Key, "file", c.File, "subject", c.Subject,
			"not_after", c.NotAfter.UTC().Format(time.RFC3339))
	}
}

// open loads the templates and connects the store (with the cancellation
// notice renderer when mail.cancel_notice is on), the first half of a
// wiring; resolveNamespace completes it.
func open(ctx context.Context, cfg *config.Config, log *slog.Logger, maxConns int32) (*wiring, error) {
	tmpl, err := templates.New(TemplatesOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("load templates: %w", err)
	}
	w := &wiring{cfg: cfg, log: log, templates: tmpl,
		notices: &consumer.Notices{Templates: tmpl, From: cfg.Mail.From, FromDomain: mailtype.AddressDomain(cfg.Mail.From)}}
	opts := store.Options{URL: cfg.Database.URL.Reveal(), MaxConns: maxConns, EventsExchange: cfg.AMQP.EventsExchange,
		RecipientLimit: RecipientLimit(cfg), AccountSuppression: cfg.Suppression.Scope == "account",
		Transient: store.TransientRule{Bounces: cfg.Suppression.TransientBounces, Window: cfg.Suppression.TransientWindow,
			Expiry: cfg.Suppression.TransientExpiry}, DeliveryConfirm: DeliveryConfirm(cfg)}
	if cfg.Mail.CancelNotice {
		opts.Notices = w.notices
	}
	if w.store, err = store.Open(ctx, opts); err != nil {
		return nil, &UnavailableError{Err: fmt.Errorf("connect to database %s: %w (check database.url, or start PostgreSQL)", cfg.Database.URL, err)}
	}
	return w, nil
}

// resolveNamespace reads the idempotency namespace (mail.idempotency_namespace,
// else the database's deployment id) before any component starts.
func (w *wiring) resolveNamespace(ctx context.Context) error {
	ns, err := w.store.IdempotencyNamespace(ctx, w.cfg.Mail.IdempotencyNamespace)
	if err != nil {
		return err
	}
	w.namespace, w.notices.IdempotencyNamespace = ns, ns
	return nil
}

// wiring holds what components are built from.
type wiring struct {
	cfg   *config.Config
	log   *slog.Logger
	store *store.Store
	reg   prometheus.Registerer
	// ready lists the readiness checks /readyz runs.
	ready []ReadyCheck
	// brokerMetrics is shared by every AMQP connection (mailsvc_amqp_connected);
	// nil in a process without the consumer and relay roles.
	brokerMetrics *broker.Metrics
	// consumer is the consumer, nil in a process without its role.
	consumer *consumer.Consumer
	// templates renders mails; built once.
	templates *templates.Registry
	// notices renders cancellation notices for the store.
	notices *consumer.Notices
	// namespace is the resolved mail.idempotency_namespace.
	namespace string
	// wakeSender and wakeRelay signal, in process, that the consumer wrote a
	// mail row or that anyone wrote an outbox row; no-ops until the sender
	// and the relay are wired.
	wakeSender func()
	wakeRelay  func()
	// recorder is what the consumer records events with: the store, or,
	// when the sender runs in this process, its Handover, which hands the
	// rows it writes to the pool in memory.
	recorder consumer.Recorder
	// tracing is the tracer provider (setupTracing); off while nil or
	// tracing.enabled is false.
	tracing *tracing.Provider
}

// build constructs the components of the roles in serve.roles, in start
// order: http first (probes answer during start-up), then the relay, the
// sender and the consumer last; stop runs in reverse, so the consumer stops
// taking deliveries first and the relay flushes last. The stop stages
// (stop.go) put the relay and http after the rest, so the relay publishes
// the sender's last feedback events. Stats runs whatever the roles: its
// gauges come from the database. A role not run registers no metric of its
// own and no readiness check.
func (w *wiring) build() ([]named, error) {
	w.brokerMetrics = w.newBrokerMetrics()
	w.wakeSender, w.wakeRelay = func() {}, func() {}
	w.recorder = w.store
	probes := newHTTPServer(w.cfg.HTTP, w.reg.(prometheus.Gatherer), &w.ready, w.log)
	parts := []named{{name: "http", c: probes, stage: stopLast}}
	for _, r := range []struct {
		role  string
		build func() ([]named, error)
	}{{config.RoleRelay, w.buildRelay}, {config.RoleSender, w.buildSender}, {config.RoleSender, w.buildAttach},
		{config.RoleConsumer, w.buildConsumer}} {
		if !w.cfg.Serve.HasRole(r.role) {
			continue
		}
		ps, err := r.build()
		if err != nil {
			return nil, err
		}
		parts = append(parts, ps...)
	}
	w.ready = readyChecks(w.store, w.consumer)
	// The support console (issue 31), on its own listener when console.addr is set.
	cons, err := w.buildConsole()
	if err != nil {
		return nil, fmt.Errorf("build the console: %w", err)
	}
	parts = append(parts, cons...)
	// stats (issue 7): the database gauges, from one query every 5 s.
	parts = append(parts, named{name: "stats", c: stats.New(w.store, stats.NewMetrics(w.reg), w.log, stats.Options{})})
	// Without the relay, the spans are flushed by a part of their own.
	if p, ok := w.spanFlushPart(); ok {
		parts = append(parts, p)
	}
	return parts, nil
}

// newBrokerMetrics registers mailsvc_amqp_connected with the series of the
// roles that open an AMQP connection here (consumer, relay); nil when none
// does.
func (w *wiring) newBrokerMetrics() *broker.Metrics {
	var amqpRoles []string
	if w.cfg.Serve.HasRole(config.RoleConsumer) {
		amqpRoles = append(amqpRoles, broker.RoleConsumer)
	}
	if w.cfg.Serve.HasRole(config.RoleRelay) {
		amqpRoles = append(amqpRoles, broker.RoleRelay)
	}
	if len(amqpRoles) == 0 {
		return nil
	}
	return broker.NewMetrics(w.reg, amqpRoles...)
}

// buildRelay builds the relay (issue 5: one active relay across replicas,
// by a lease row); it sets w.wakeRelay.
func (w *wiring) buildRelay() ([]named, error) {
	rcfg := relayConfig(w.cfg)
	rcfg.Tracer = w.tracing.Tracer("relay")
	rel, err := relay.New(rcfg, w.store, w.log, relay.NewMetrics(w.reg), w.brokerMetrics)
	if err != nil {
		return nil, fmt.Errorf("build relay: %w", err)
	}
	w.wakeRelay = rel.Wake
	// queuestats: the broker's counts of the input and dead-letter queues,
	// read by the last known relay leader only (through a database outage too).
	qs := queuestats.New(queueStatsConfig(w.cfg), queuestats.NewMetrics(w.reg), w.log, rel.LastKnownLeader)
	// The relay's publish spans are the last ones: the spans are flushed
	// when it has stopped, within its budget.
	return []named{{name: "relay", c: w.withTracingFlush(rel), stage: stopLast}, {name: "queuestats", c: qs}}, nil
}

// buildConsumer builds the consumer (issue 3), last, so that it stops
// before the relay and the sender; it sets w.consumer.
func (w *wiring) buildConsumer() ([]named, error) {
	ccfg := ConsumerConfig(w.cfg)
	ccfg.IdempotencyNamespace = w.namespace
	cons, err := consumer.New(ccfg, consumer.Options{
		Store: w.recorder, Templates: w.templates, Log: w.log, Registerer: w.reg, BrokerMetrics: w.brokerMetrics,
		OnMailInserted: func() { w.wakeSender() }, OnOutboxWritten: func() { w.wakeRelay() },
		Tracer: w.tracing.Tracer("consumer"),
	})
	if err != nil {
		return nil, fmt.Errorf("build consumer: %w", err)
	}
	w.consumer = cons
	parts := []named{{name: "consumer", c: cons}}
	// webhooks (issue 15): provider feedback on a listener of its own, when
	// webhooks.addr is set, part of the intake (the consumer role); it
	// stops with the consumer, before the relay.
	// Its metrics are exported (at zero) when it is off too, so that the
	// bounce and complaint alerts find their series.
	hookMetrics := webhook.NewMetrics(w.reg)
	if w.cfg.Webhooks.Addr != "" {
		hooks, err := webhook.New(webhookConfig(w.cfg), webhook.Deps{Store: w.store, Metrics: hookMetrics,
			Log: w.log, OnOutboxWritten: func() { w.wakeRelay() }})
		if err != nil {
			return nil, fmt.Errorf("build webhooks: %w", err)
		}
		parts = append(parts, named{name: "webhooks", c: hooks})
	}
	// The bounce listener (bounces.addr): SMTP's reports, part of the
	// intake like the webhooks.
	bounceMetrics := bounce.NewMetrics(w.reg)
	if w.cfg.Bounces.Addr != "" {
		bc, err := bounceConfig(w.cfg)
		if err != nil {
			return nil, err
		}
		srv, err := bounce.New(bc, bounce.Deps{Store: w.store, Metrics: bounceMetrics, Log: w.log,
			OnOutboxWritten: func() { w.wakeRelay() }})
		if err != nil {
			return nil, fmt.Errorf("build the bounce listener: %w", err)
		}
		parts = append(parts, named{name: "bounces", c: srv})
	}
	if w.cfg.Bounces.IMAPURL != "" {
		p, err := bounce.NewPoller(pollerConfig(w.cfg), bounce.Deps{Store: w.store, Metrics: bounceMetrics, Log: w.log,
			OnOutboxWritten: func() { w.wakeRelay() }})
		if err != nil {
			return nil, fmt.Errorf("build the bounce mailbox poller: %w", err)
		}
		parts = append(parts, named{name: "bounce-mailbox", c: p})
	}
	return parts, nil
}

// readyChecks are what /readyz requires, in the order it reports them:
// the database answers, the schema is current, the database accepts
// writes (every role writes), and, where the process runs the consumer
// (cons not nil), the consumer's channel is open. "Accepts writes" is the
// store's write probe (zero-row writes, which PostgreSQL checks for
// read-only mode and privileges like real ones) and the consumer's own
// last outcome, which also covers a refusal the probe cannot see. The
// relay's broker connection is no condition: only one replica leads.
func readyChecks(st *store.Store, cons *consumer.Consumer) []ReadyCheck {
	checks := []ReadyCheck{
		{Name: "database", Check: st.Ping},
		{Name: "schema", Check: st.CheckSchema},
		{Name: "database", Check: func(ctx context.Context) error {
			if cons != nil {
				if err := cons.WritesAccepted(ctx); err != nil {
					return err
				}
			}
			return st.CheckWritable(ctx)
		}},
	}
	if cons != nil {
		checks = append(checks, ReadyCheck{Name: "broker", Check: cons.Ready})
	}
	return checks
}

// buildSender builds the sender pool on the provider of sender.provider
// (and sender.fallback_provider, when set), and the janitor; it sets
// w.wakeSender.
func (w *wiring) buildSender() ([]named, error) {
	prov, err := w.provider(w.cfg.Sender.Provider)
	if err != nil {
		return nil, fmt.Errorf("build sender provider: %w", err)
	}
	var fallback sender.Provider
	if name := w.cfg.Sender.FallbackProvider; name != "" {
		if fallback, err = w.provider(name); err != nil {
			return nil, fmt.Errorf("build the fallback provider (sender.fallback_provider): %w", err)
		}
	}
	metrics := sender.NewMetrics(w.reg)
	pool, err := sender.New(senderConfig(w.cfg), sender.Deps{Store: w.store, Provider: prov, Fallback: fallback,
		Metrics: metrics, Log: w.log, Templates: w.templates, OnOutboxWritten: func() { w.wakeRelay() },
		Tracer: w.tracing.Tracer("sender")})
	if err != nil {
		return nil, fmt.Errorf("build sender: %w", err)
	}
	jan, err := sender.NewJanitor(janitorConfig(w.cfg), sender.JanitorDeps{Store: w.store, Provider: prov, Fallback: fallback,
		Templates: w.templates, Metrics: metrics, Log: w.log, OnOutboxWritten: func() { w.wakeRelay() }})
	if err != nil {
		return nil, fmt.Errorf("build janitor: %w", err)
	}
	w.wakeSender = pool.Wake
	w.recorder = pool.Handover(w.store)
	return []named{{name: "sender", c: pool, budget: senderStopBudget(w.cfg)}, {name: "janitor", c: jan}}, nil
}

// provider builds the provider called name ("smtp" or "resend") from its
// config section.
func (w *wiring) provider(name string) (sender.Provider, error) {
	if name == "resend" {
		return resend.New(resendConfig(w.cfg))
	}
	return smtp.New(smtpConfig(w.cfg))
}
