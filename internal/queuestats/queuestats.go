// Package queuestats reads the broker's own view of mailsvc's two queues
// (the input queue and the dead-letter queue) into gauges, periodically, on
// the one replica that holds the relay lease, or held it last while the
// database is down (relay.Relay.LastKnownLeader; docs/design.md, "Metrics"):
// the queue depth a producer sees and mailsvc's own counters cannot, such
// as messages the broker dead-lettered by itself after the delivery limit,
// or a backlog that grows while the database is down.
//
// It reads the ready messages and the consumers of each queue with a
// passive queue.declare on a connection of its own. AMQP does not tell the
// unacknowledged deliveries: with a management API configured
// (amqp.management_url) every number comes from it instead, state
// "unacked" included; without one the unacked series are not exported at
// all (absent, never a made-up 0).
package queuestats

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
)

// Queue label values of mailsvc_queue_messages and mailsvc_queue_consumers.
const (
	QueueInput      = "input"
	QueueDeadLetter = "dead_letter"
)

// State label values of mailsvc_queue_messages.
const (
	StateReady   = "ready"
	StateUnacked = "unacked"
)

// DefaultInterval is how often the leader reads the queues.
const DefaultInterval = 10 * time.Second

// Config says which queues to read and how.
type Config struct {
	// AMQP is the broker connection (amqp.url); Name defaults to
	// "mailsvc-queuestats".
	AMQP broker.Config
	// Input and DeadLetter are the queue names (amqp.queue,
	// amqp.dead_letter_queue).
	Input, DeadLetter string
	// Management, when set, is read instead of AMQP (amqp.management_url).
	Management *broker.Management
	// InputMaxLength and DeadLetterMaxLength are the configured length
	// limits (amqp.max_queue_length, amqp.max_dead_letter_queue_length),
	// exported as mailsvc_queue_max_messages so that an alert can compare
	// the depth with them; 0 exports none.
	InputMaxLength, DeadLetterMaxLength int
	// Interval between reads; 0 means DefaultInterval.
	Interval time.Duration
}

// Metrics are the queue gauges; series exist only on the replica that
// reads them (the relay leader).
type Metrics struct {
	// Messages is mailsvc_queue_messages{queue,state}.
	Messages *prometheus.GaugeVec
	// Consumers is mailsvc_queue_consumers{queue}.
	Consumers *prometheus.GaugeVec
	// MaxMessages is mailsvc_queue_max_messages{queue}: the configured
	// length limit (with amqp.queue_limits policy, the value the policy
	// should carry).
	MaxMessages *prometheus.GaugeVec
	// Errors counts reads of a queue that failed (broker unreachable,
	// queue missing, management API refusing).
	Errors prometheus.Counter
}

// NewMetrics registers the queue gauges on reg. It panics when they are
// already registered (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Messages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_queue_messages",
			Help: "Messages in mailsvc's queues as the broker counts them (queue input or dead_letter; state ready, or unacked with amqp.management_url), read by the relay leader.",
		}, []string{"queue", "state"}),
		Consumers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_queue_consumers",
			Help: "Consumers of mailsvc's queues as the broker counts them, read by the relay leader.",
		}, []string{"queue"}),
		MaxMessages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_queue_max_messages",
			Help: "The configured length limit of mailsvc's queues (amqp.max_queue_length, amqp.max_dead_letter_queue_length), exported by the relay leader.",
		}, []string{"queue"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_queue_inspect_errors_total",
			Help: "Reads of a queue's state from the broker that failed.",
		}),
	}
	reg.MustRegister(m.Messages, m.Consumers, m.MaxMessages, m.Errors)
	return m
}

// Reader reads the queues into Metrics every Interval while leading()
// reports true. Start and Stop follow internal/lifecycle.
type Reader struct {
	cfg     Config
	m       *Metrics
	log     *slog.Logger
	leading func() bool

	conn    *broker.Conn // owned by the loop
	failing bool         // the last read failed (logged once per streak)

	life lifecycle.Life
}

// New returns a Reader; leading says whether this replica is the one that
// reads (the relay's LastKnownLeader). Nothing runs until Start.
func New(cfg Config, m *Metrics, log *slog.Logger, leading func() bool) *Reader {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.AMQP.Name == "" {
		cfg.AMQP.Name = "mailsvc-queuestats"
	}
	if cfg.AMQP.DialTimeout <= 0 {
		cfg.AMQP.DialTimeout = 5 * time.Second
	}
	return &Reader{cfg: cfg, m: m, log: log.With("component", "queuestats"), leading: leading}
}

// Start reads at once in the background, then every Interval and as soon
// as leadership changes (checked every second), until Stop.
// It follows internal/lifecycle; an unreachable broker is no error (it is
// logged and counted, and the series are removed).
func (r *Reader) Start(ctx context.Context) error {
	return r.life.Start(ctx, func(stop, _ context.Context) error {
		r.loop(stop)
		return nil
	})
}

// Stop ends the loop and closes its connection, waiting until ctx is done.
func (r *Reader) Stop(ctx context.Context) error { return r.life.Stop(ctx) }

// Done is closed once the loop has ended; Err then says why.
func (r *Reader) Done() <-chan struct{} { return r.life.Done() }

// Err is what ended the loop, nil while it runs.
func (r *Reader) Err() error { return r.life.Err() }

// leadershipPoll is how often the loop checks whether this replica leads,
// so that a new leader reports within about a second of taking the lease,
// and a replica that lost it drops its series as fast.
const leadershipPoll = time.Second

func (r *Reader) loop(ctx context.Context) {
	defer r.disconnect()
	t := time.NewTicker(min(leadershipPoll, r.cfg.Interval))
	defer t.Stop()
	var last time.Time
	led := false
	for {
		now, leads := time.Now(), r.leading()
		if leads != led || now.Sub(last) >= r.cfg.Interval {
			r.Refresh(ctx)
			last, led = now, leads
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh reads both queues once and sets the gauges, or removes every
// series when this replica does not lead. A queue whose read fails loses
// its series (a frozen value would look like a healthy one) and counts an
// error. Refresh is not safe for concurrent use with itself.
func (r *Reader) Refresh(ctx context.Context) {
	if !r.leading() {
		r.m.Messages.Reset()
		r.m.Consumers.Reset()
		r.m.MaxMessages.Reset()
		r.disconnect()
		return
	}
	var errs []error
	for _, q := range []struct {
		label, name string
		max         int
	}{{QueueInput, r.cfg.Input, r.cfg.InputMaxLength}, {QueueDeadLetter, r.cfg.DeadLetter, r.cfg.DeadLetterMaxLength}} {
		if q.max > 0 {
			r.m.MaxMessages.WithLabelValues(q.label).Set(float64(q.max))
		}
		st, err := r.read(ctx, q.name)
		if err != nil {
			r.m.Errors.Inc()
			r.forget(q.label)
			errs = append(errs, err)
			continue
		}
		r.set(q.label, st)
	}
	err := errors.Join(errs...)
	switch {
	case err != nil && !r.failing:
		r.log.Warn("reading the queues from the broker failed; their gauges are absent until it works", "error", err)
	case err == nil && r.failing:
		r.log.Info("reading the queues from the broker works again")
	}
	r.failing = err != nil
}

// read is one queue's state, from the management API or over AMQP (on a
// connection dialled when needed and dropped after a failure).
func (r *Reader) read(ctx context.Context, queue string) (broker.QueueState, error) {
	if r.cfg.Management != nil {
		mctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
		defer cancel()
		return r.cfg.Management.InspectQueue(mctx, queue)
	}
	if r.conn == nil || r.conn.IsClosed() {
		conn, err := broker.Dial(r.cfg.AMQP)
		if err != nil {
			return broker.QueueState{}, err
		}
		r.conn = conn
	}
	st, err := r.conn.InspectQueue(queue)
	if err != nil && !errors.Is(err, broker.ErrNoQueue) {
		r.disconnect()
	}
	return st, err
}

func (r *Reader) set(label string, st broker.QueueState) {
	r.m.Messages.WithLabelValues(label, StateReady).Set(float64(st.Ready))
	if st.Unacked >= 0 {
		r.m.Messages.WithLabelValues(label, StateUnacked).Set(float64(st.Unacked))
	} else {
		r.m.Messages.DeleteLabelValues(label, StateUnacked)
	}
	r.m.Consumers.WithLabelValues(label).Set(float64(st.Consumers))
}

func (r *Reader) forget(label string) {
	r.m.Messages.DeleteLabelValues(label, StateReady)
	r.m.Messages.DeleteLabelValues(label, StateUnacked)
	r.m.Consumers.DeleteLabelValues(label)
}

func (r *Reader) disconnect() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}
