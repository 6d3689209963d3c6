// Package relay publishes the outbox to the events exchange (mail.events),
// the third hop of mailsvc (docs/design.md, "The hops" and "The outbox relay lease"): rows oldest
// first, one order's rows in write order, with publisher confirms, and a
// row is marked published only after a real broker ack. Exactly one relay
// is active across all replicas: the holder of the relay lease, a row in
// table relay_lease with an expiry on the database's clock and an epoch
// (fencing token) that every write of the leader checks. The leader renews
// it every LeaseRenew; the others stand by, and take over within
// LeaseRetry of the holder releasing it (a clean stop) or of its expiry (a
// crash, a vanished host, a partition), whatever happens to the holder's
// TCP connections. The lease is no session state, so the relay works
// through any connection pooler.
//
// Delivery is at-least-once: a relay that dies between the ack and the mark
// publishes the row again with the same event_id (consumers dedupe by it).
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// Config configures the relay. Zero values take the defaults named on
// each field (WithDefaults).
type Config struct {
	// AMQP says how to reach the broker and how fast to reconnect.
	AMQP broker.Config
	// Exchange is the events exchange (amqp.events_exchange). Rows carry
	// their own exchange; this one is declared (topic, durable) when
	// DeclareExchange is set (amqp.declare_topology).
	Exchange        string
	DeclareExchange bool
	// EventsQueue, when set with DeclareExchange, is declared (durable) and
	// bound with "#" to Exchange (amqp.events_queue).
	EventsQueue string
	// Name is the application_name of the relay's PostgreSQL connections
	// and the start of its lease holder name (Name@host/pid/random); ""
	// means "mailsvc-relay".
	Name string
	// BatchSize is the most rows one publish round takes (relay.batch_size);
	// 0 means 100, at most broker.MaxBatch.
	BatchSize int
	// PollInterval is how often the active relay looks for due rows when no
	// wake-up arrived (relay.poll_interval); 0 means 1s.
	PollInterval time.Duration
	// DisableListen turns off the LISTEN/NOTIFY wake-ups (relay.listen
	// false), leaving polling alone; behind a transaction-pooling proxy the
	// notifications never arrive anyway. false means listen.
	DisableListen bool
	// ConfirmTimeout bounds the wait for one round's publisher confirms
	// (relay.confirm_timeout); 0 means 10s.
	ConfirmTimeout time.Duration
	// MaxAttempts is the failed publishes after which a row is dead
	// (relay.max_attempts); 0 means 10.
	MaxAttempts int
	// RetryBackoff and RetryBackoffMax are the first and largest delay
	// before a failed row is retried (exponential, jittered); 0 means 1s
	// and 1m.
	RetryBackoff, RetryBackoffMax time.Duration
	// UnroutableWindow is how long a row whose publishes come back
	// unroutable (no queue bound to its exchange for its routing key: the
	// order services have not bound theirs yet, or one is being
	// re-created) is retried before it may die (relay.unroutable_window);
	// 0 means 24h. Until then an unroutable publish never counts toward
	// MaxAttempts, measured from the row's created_at.
	UnroutableWindow time.Duration
	// UnroutableBackoffMax is the largest delay between two publishes of a
	// row that came back unroutable; 0 means 5m.
	UnroutableBackoffMax time.Duration
	// Lease is how long the relay lease lasts after each renewal, on the
	// database's clock (relay.lease); 0 means 15s. It bounds how long the
	// outbox waits when a leader vanishes without a word.
	Lease time.Duration
	// LeaseRenew is how often the leader renews the lease
	// (relay.lease_renew); 0 means 5s, and it must be at most Lease/3. A
	// leader that has not renewed for Lease-LeaseRenew (measured from the
	// start of its last successful renewal) steps down, LeaseRenew before
	// any other replica can take over.
	LeaseRenew time.Duration
	// LeaseRetry is how often a standby replica tries to take the lease
	// (relay.lease_retry); 0 means 2s.
	LeaseRetry time.Duration
	// BrokerStepDown is how long the active relay keeps the lease while it
	// cannot reach the broker; after that it releases the lease so that a
	// replica that can reach the broker takes over. 0 means 30s.
	BrokerStepDown time.Duration
	// ReconnectBackoff and ReconnectBackoffMax bound the delay between
	// attempts to reopen the LISTEN connection, and between publish rounds
	// while the database fails; 0 means 500ms and 15s.
	ReconnectBackoff, ReconnectBackoffMax time.Duration
	// RetentionWindow is how long published rows are kept
	// (retention.window); 0 keeps them forever.
	RetentionWindow time.Duration
	// RetentionInterval is how often the active relay deletes expired rows;
	// 0 means 1m. RetentionBatch is the most rows one DELETE takes; 0 means
	// 1000.
	RetentionInterval time.Duration
	RetentionBatch    int
	// Tracer starts the publish span of each feedback event and puts its
	// traceparent on the message (tracing.Provider's "relay" tracer); nil
	// is tracing off: no span, no traceparent header.
	Tracer *tracing.Tracer
}

// WithDefaults returns c with every zero field set to its default.
// A field with a key takes its key's default (DefaultSettings).
func (c Config) WithDefaults() Config {
	d := DefaultSettings()
	setInt(&c.BatchSize, d.BatchSize)
	setInt(&c.MaxAttempts, d.MaxAttempts)
	setInt(&c.RetentionBatch, 1000)
	setDur(&c.PollInterval, d.PollInterval)
	setDur(&c.ConfirmTimeout, d.ConfirmTimeout)
	setDur(&c.RetryBackoff, time.Second)
	setDur(&c.RetryBackoffMax, time.Minute)
	setDur(&c.UnroutableWindow, d.UnroutableWindow)
	setDur(&c.UnroutableBackoffMax, 5*time.Minute)
	setDur(&c.Lease, d.Lease)
	setDur(&c.LeaseRenew, d.LeaseRenew)
	setDur(&c.LeaseRetry, d.LeaseRetry)
	setDur(&c.BrokerStepDown, 30*time.Second)
	setDur(&c.ReconnectBackoff, 500*time.Millisecond)
	setDur(&c.ReconnectBackoffMax, 15*time.Second)
	setDur(&c.RetentionInterval, time.Minute)
	if c.Name == "" {
		c.Name = "mailsvc-relay"
	}
	return c
}

func setInt(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

func setDur(v *time.Duration, d time.Duration) {
	if *v == 0 {
		*v = d
	}
}

// Validate reports every invalid field at once (errors.Join).
func (c Config) Validate() error {
	var errs []error
	if c.AMQP.URL == "" {
		errs = append(errs, errors.New("relay: AMQP.URL is empty"))
	}
	if c.DeclareExchange && c.Exchange == "" {
		errs = append(errs, errors.New("relay: Exchange is empty but DeclareExchange is set"))
	}
	if c.BatchSize < 1 || c.BatchSize > broker.MaxBatch {
		errs = append(errs, fmt.Errorf("relay: BatchSize %d is outside 1..%d", c.BatchSize, broker.MaxBatch))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("relay: MaxAttempts %d must be at least 1", c.MaxAttempts))
	}
	for name, d := range map[string]time.Duration{
		"PollInterval": c.PollInterval, "ConfirmTimeout": c.ConfirmTimeout, "RetryBackoff": c.RetryBackoff,
		"RetryBackoffMax": c.RetryBackoffMax, "Lease": c.Lease, "LeaseRenew": c.LeaseRenew, "LeaseRetry": c.LeaseRetry,
		"BrokerStepDown": c.BrokerStepDown, "ReconnectBackoff": c.ReconnectBackoff,
		"UnroutableWindow": c.UnroutableWindow, "UnroutableBackoffMax": c.UnroutableBackoffMax,
		"ReconnectBackoffMax": c.ReconnectBackoffMax, "RetentionInterval": c.RetentionInterval,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("relay: %s must be positive", name))
		}
	}
	if c.LeaseRenew > 0 && c.Lease < 3*c.LeaseRenew {
		errs = append(errs, fmt.Errorf("relay: LeaseRenew %s must be at most a third of Lease %s", c.LeaseRenew, c.Lease))
	}
	if c.RetentionWindow < 0 {
		errs = append(errs, errors.New("relay: RetentionWindow must not be negative"))
	}
	if c.RetentionBatch < 1 {
		errs = append(errs, fmt.Errorf("relay: RetentionBatch %d must be at least 1", c.RetentionBatch))
	}
	return errors.Join(errs...)
}

// Relay is the outbox relay. Build it with New; its methods are safe for
// concurrent use.
type Relay struct {
	cfg    Config
	st     Store
	log    *slog.Logger
	m      *Metrics
	onConn func(bool)
	wake   chan struct{}
	// holder names this relay in the lease row: unique per relay, so that
	// it can take back its own lease without waiting for the expiry.
	holder string
	// testSignals are inert unless a test enabled them (testsignal.go).
	testSignals testSignals
	// lastLeader is true while this relay holds the lease, and after it
	// stepped down without seeing another relay take it, until it does
	// (LastKnownLeader).
	lastLeader atomic.Bool

	life lifecycle.Life
}

// New returns a relay that publishes st's outbox. cfg is completed with
// WithDefaults and validated; the error lists every invalid field. m must
// not be nil; bm may be nil (no mailsvc_amqp_connected and
// mailsvc_amqp_blocked gauges).
func New(cfg Config, st Store, log *slog.Logger, m *Metrics, bm *broker.Metrics) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.AMQP.OnBlocked = bm.OnBlocked(broker.RoleRelay)
	return &Relay{
		cfg: cfg, st: st, log: log.With("component", "relay"), m: m,
		onConn: bm.OnState(broker.RoleRelay), wake: make(chan struct{}, 1), holder: holderName(cfg.Name),
	}, nil
}

// holderName is name@host/pid/random: readable in the lease row, and
// unique even for two relays of one process.
func holderName(name string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s@%s/%d/%s", name, host, os.Getpid(), hex.EncodeToString(b))
}

// Wake tells the relay, without blocking, that an outbox row was written,
// so the active relay publishes it now rather than at the next poll. Safe
// to call at any time, from any goroutine, before Start and after Stop.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the relay in the background and returns at once. The relay
// reconnects to the database and the broker by itself and never returns an
// error after Start. It follows the rules of internal/lifecycle:
// cancelling ctx does not stop it (Stop does), and a second Start, or one
// after Stop, returns lifecycle.ErrStarted. A database configuration its
// pool refuses is Start's error, and leaves the relay unstarted.
func (r *Relay) Start(ctx context.Context) error {
	return r.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		db, err := r.st.OpenRelay(r.cfg.Name, r.cfg.LeaseRenew)
		if err != nil {
			return nil, err
		}
		return func(stop, abort context.Context) error {
			r.run(stop, abort, db)
			db.Close()
			return nil
		}, nil
	})
}

// Stop stops the relay: no new round starts, the round in flight finishes
// (its confirms waited for and its results recorded) unless ctx ends
// first, in which case the round is aborted and its rows stay unpublished
// (published again later, same event_id). It releases the lease. Then it
// waits, while ctx lasts, for the relay's connections to close: one whose
// database stopped answering mid-statement takes pgx up to 15 s, and once
// ctx ends it finishes closing in the background. Stop is idempotent,
// safe without Start, and returns ctx's error as soon as ctx ends before
// the relay stopped (lifecycle.Life.Stop).
func (r *Relay) Stop(ctx context.Context) error {
	return r.life.Stop(ctx)
}

// LastKnownLeader reports whether this relay holds the relay lease, or held
// it last as far as it knows: after it stepped down because the database
// stopped answering (where the lease lives) it stays the last known leader
// until it sees another relay hold the lease, or stops. That is the one
// replica that reads the broker's queue gauges (internal/queuestats), and
// it keeps reading them through a database outage, when no replica can
// take the lease and those gauges matter most. During a partition that
// lets another replica take the lease, two replicas read them for a while
// (alerts take max across replicas). Safe for concurrent use.
func (r *Relay) LastKnownLeader() bool { return r.lastLeader.Load() }

// Done is closed once the relay has stopped and closed its connections;
// Err then says why.
func (r *Relay) Done() <-chan struct{} { return r.life.Done() }

// Err is what ended the relay, nil while it runs (lifecycle.Life.Err).
func (r *Relay) Err() error { return r.life.Err() }
