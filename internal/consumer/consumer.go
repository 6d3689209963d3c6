// Package consumer is the first hop of mailsvc: it consumes order events
// from RabbitMQ and records them in PostgreSQL, acknowledging a delivery
// only after the transaction that records it has committed (docs/design.md,
// "The hops"; docs/architecture.md, "From delivery to row").
//
// Transport is kept apart from decisions: Decider.Decide classifies one
// message (record, ignore, dead-letter with a reason) without a broker or
// a database; the connection loop (connection.go, batch.go) records a batch in
// one transaction through store.Ingest, publishes poison messages to the
// dead-letter exchange and waits for their confirms, and acks.
//
// Failure handling: the connection is supervised by broker.Supervise
// (capped exponential backoff with jitter); a closed channel, a closed
// deliveries channel or a broker-side cancel ends the connection, whose
// unacknowledged deliveries are abandoned with their channel (delivery
// tags belong to it) and redelivered by the broker. While the database
// fails, the batch is held and retried in process: nothing is acked,
// nothing is dead-lettered, no new delivery is taken (the prefetch window
// stays full), and a new connection only starts consuming once the database
// accepts a write probe, so an outage does not spend the queue's delivery
// limit. A database that answers but refuses writes (read-only, a revoked
// privilege) is different: the deliveries are given back once and the
// consumer stays off the queue until writes work (refusal.go).
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// Recorder records events; *store.Store implements it.
type Recorder interface {
	// Ingest records items atomically (see store.Store.Ingest).
	Ingest(ctx context.Context, items []store.IngestItem) ([]store.IngestResult, error)
	// CheckWritable checks that the database accepts writes (see
	// store.Store.CheckWritable); the consumer takes no delivery until it
	// does.
	CheckWritable(ctx context.Context) error
}

// Options are a Consumer's collaborators.
type Options struct {
	// Store and Templates are required.
	Store     Recorder
	Templates Renderer
	// Log receives the consumer's log lines; nil discards them.
	Log *slog.Logger
	// Registerer receives the consumer's Metrics; nil keeps them in a
	// private registry.
	Registerer prometheus.Registerer
	// BrokerMetrics holds mailsvc_amqp_connected and mailsvc_amqp_blocked;
	// nil leaves them unset.
	BrokerMetrics *broker.Metrics
	// OnMailInserted is called after a commit that inserted a pending mail
	// (wakes the sender); OnOutboxWritten after one that wrote outbox rows
	// (wakes the relay). Both may be nil and must not block.
	OnMailInserted  func()
	OnOutboxWritten func()
	// Tracer starts the process span of each delivery (tracing.Provider's
	// "consumer" tracer); nil is tracing off.
	Tracer *tracing.Tracer
}

// Consumer consumes the input queue. Start and Stop follow
// internal/lifecycle. Its methods are safe for concurrent use.
type Consumer struct {
	cfg       Config
	store     Recorder
	decider   *Decider
	log       *slog.Logger
	metrics   *Metrics
	onState   func(bool)
	onBlocked func(bool)
	onMail    func()
	onOutbox  func()
	tracer    *tracing.Tracer

	life lifecycle.Life
	// stopping is closed by Stop (drain and finish); cancel is the hard
	// stop of everything. Both are set when the consumer starts.
	stopping <-chan struct{}
	cancel   context.CancelFunc

	mu            sync.Mutex
	conn          *broker.Conn    // current connection, closed on hard stop
	ch            *broker.Channel // consuming channel, nil when not consuming
	stopRequested bool

	// refusal tracks a database that refuses writes (refusal.go).
	refusal refusal
}

// New validates cfg (after WithDefaults) and builds a Consumer; it does not
// connect. It returns an error for an invalid config or a missing
// collaborator.
func New(cfg Config, o Options) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Store == nil || o.Templates == nil {
		return nil, errors.New("consumer: Options.Store and Options.Templates are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	nop := func() {}
	c := &Consumer{
		cfg: cfg, store: o.Store, log: o.Log.With("component", "consumer"),
		decider: &Decider{
			MaxBytes: cfg.MaxMessageBytes, MaxEventAge: cfg.MaxEventAge,
			From: cfg.MailFrom, ReplyTo: cfg.MailReplyTo, IdempotencyNamespace: cfg.IdempotencyNamespace,
			FromDomain: mailtype.AddressDomain(cfg.MailFrom), Templates: o.Templates,
			Attachments: cfg.Attachments,
		},
		metrics: NewMetrics(o.Registerer), onState: o.BrokerMetrics.OnState(broker.RoleConsumer),
		onBlocked: o.BrokerMetrics.OnBlocked(broker.RoleConsumer),
		onMail:    o.OnMailInserted, onOutbox: o.OnOutboxWritten, tracer: o.Tracer,
	}
	if c.onMail == nil {
		c.onMail = nop
	}
	if c.onOutbox == nil {
		c.onOutbox = nop
	}
	return c, nil
}

// Start connects and consumes in the background and returns at once; a
// broker or database that is down is retried, not an error. It follows the
// rules of internal/lifecycle: the consumer runs until Stop, ctx's
// cancellation does not stop it (the daemon cancels its context on SIGTERM
// before it calls Stop, which must still drain), and a second Start, or
// one after Stop, returns lifecycle.ErrStarted.
func (c *Consumer) Start(ctx context.Context) error {
	return c.life.Start(ctx, c.run)
}

// run is the consumer's body: stop drains (basic.cancel, then the
// deliveries received are recorded and acked), abort cuts the work in
// flight and closes the connection, which unblocks any broker call.
func (c *Consumer) run(stop, abort context.Context) error {
	runCtx, cancel := context.WithCancel(abort)
	defer cancel()
	c.stopping, c.cancel = stop.Done(), cancel
	closeConn := context.AfterFunc(abort, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.conn != nil {
			_ = c.conn.Close()
		}
	})
	defer closeConn()
	bcfg := broker.Config{URL: c.cfg.URL, TLS: c.cfg.TLS, Name: c.cfg.ConnectionName, Backoff: c.cfg.ReconnectBackoff,
		BackoffMax: c.cfg.ReconnectBackoffMax, OnBlocked: c.onBlocked}
	go c.watchStop(runCtx)
	// nil once runCtx is done; a topology mismatch ends the consumer (and
	// the daemon) with the error that says what to run.
	if err := broker.Supervise(runCtx, bcfg, c.log, c.onState, c.onConnection); err != nil {
		c.log.Error("the broker refused the topology; the consumer stops", "error", err)
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// Stop stops consuming (basic.cancel), lets the deliveries already
// received be recorded and acked, and closes the connection. When ctx ends
// first, it cancels the work in flight and closes the connection, and
// returns ctx's error at once; the unacknowledged deliveries go back to
// the queue. Stop is idempotent and safe to call without Start
// (lifecycle.Life.Stop).
func (c *Consumer) Stop(ctx context.Context) error {
	return c.life.Stop(ctx)
}

// Done is closed once the consumer has stopped; Err then says why.
func (c *Consumer) Done() <-chan struct{} { return c.life.Done() }

// Err is what ended the consumer, nil while it runs (lifecycle.Life.Err).
func (c *Consumer) Err() error { return c.life.Err() }

// Ready returns nil while the consumer's channel is open and consuming,
// for /readyz.
func (c *Consumer) Ready(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil || c.ch.IsClosed() {
		return errors.New("consumer channel is not open")
	}
	return nil
}

// WritesAccepted returns nil unless the database refused the consumer's
// last attempt to record a batch, or its last write probe: then an error
// that says since when (for /readyz). It does no I/O.
func (c *Consumer) WritesAccepted(context.Context) error {
	return c.refusal.status()
}

// watchStop ends the consumer on Stop when no connection is consuming (one
// that is drains first and ends it itself, in endConsuming).
func (c *Consumer) watchStop(ctx context.Context) {
	select {
	case <-c.stopping:
	case <-ctx.Done():
		return
	}
	c.mu.Lock()
	c.stopRequested = true
	consuming := c.ch != nil
	c.mu.Unlock()
	if !consuming {
		c.cancel()
	}
}

// beginConsuming records ch as the consuming channel; it reports false
// (and ends the consumer) when Stop came first.
func (c *Consumer) beginConsuming(ch *broker.Channel) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopRequested {
		c.cancel()
		return false
	}
	c.ch = ch
	c.metrics.Connections.Inc()
	return true
}

// endConsuming clears the consuming channel, and ends the consumer when
// the connection ended because of Stop.
func (c *Consumer) endConsuming() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ch = nil
	if c.stopRequested {
		c.cancel()
	}
}

func (c *Consumer) setConn(conn *broker.Conn) {
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
}
