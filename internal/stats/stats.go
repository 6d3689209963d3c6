// Package stats keeps the database-derived gauges of docs/design.md, "Metrics"
// (mails by status, oldest pending mail, outbox backlog, its age and dead
// rows, delivery-unconfirmed mails) up to date with one periodic query, so
// a Prometheus scrape never touches the database and many scrapers cost
// nothing more.
package stats

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// DefaultInterval is how often the gauges are refreshed when Options
// leaves Interval zero.
const DefaultInterval = 5 * time.Second

// Source reads one snapshot of the gauges; *store.Store implements it.
type Source interface {
	// Stats reads the snapshot; its cost does not grow with finished rows.
	Stats(ctx context.Context) (store.Stats, error)
	// CompactStatusCounts folds the deltas of the finished-mail counters
	// into their totals (housekeeping: Stats is exact without it).
	CompactStatusCounts(ctx context.Context) (int64, error)
}

// Analyzer is a Source that also keeps the planner statistics of its hot
// tables fresh (*store.Store does: AnalyzeStale). The Collector calls it
// every Options.AnalyzeInterval.
type Analyzer interface {
	// AnalyzeStale analyzes the tables whose statistics are stale and
	// returns their names.
	AnalyzeStale(ctx context.Context) ([]string, error)
}

// HealthSource is a Source that also reports the database's health
// (*store.Store does: DBHealth). The Collector reads it with every
// refresh.
type HealthSource interface {
	// DBHealth reads the statistics of mailsvc's tables and the lag of
	// the primary's standbys.
	DBHealth(ctx context.Context) (store.DBHealth, error)
}

// DefaultAnalyzeInterval is how often an Analyzer source is asked to
// analyze stale tables: the check is one read of the statistics views.
const DefaultAnalyzeInterval = time.Second

// Providers are the provider label values of the delivery-unconfirmed
// gauges, each pre-set to 0 (config.Providers).
var Providers = []string{"smtp", "resend"}

// Metrics are the gauges this package owns.
type Metrics struct {
	Mails            *prometheus.GaugeVec
	OldestPendingAge prometheus.Gauge
	OutboxPending    prometheus.Gauge
	OutboxOldestAge  prometheus.Gauge
	OutboxDead       prometheus.Gauge
	// Unconfirmed is mailsvc_mails_delivery_unconfirmed{provider}: the
	// sent mails flagged "delivery unconfirmed" (store.DeliveryConfirm),
	// 0 for a provider that does not report deliveries.
	Unconfirmed *prometheus.GaugeVec
	// UnconfirmedRecent is
	// mailsvc_mails_delivery_unconfirmed_recent{provider}: those of them
	// whose deadline passed within the last store.UnconfirmedWindow (an
	// hour), the rate at which mails become unconfirmed.
	UnconfirmedRecent *prometheus.GaugeVec
	// LastRefresh is the Unix time of the last successful refresh, so an
	// alert can tell frozen gauges from a healthy zero.
	LastRefresh prometheus.Gauge
	// RefreshErrors counts refreshes that failed (database unreachable).
	RefreshErrors prometheus.Counter
	// DB are the database health gauges (HealthSource).
	DB *DBMetrics
}

// NewMetrics registers the gauges on reg, with mailsvc_mails pre-set to 0
// for every status. It panics when they are already registered (a wiring
// bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &Metrics{
		Mails: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_mails", Help: "Mail rows per status, refreshed periodically from the database.",
		}, []string{"status"}),
		OldestPendingAge: g("mailsvc_oldest_pending_age_seconds", "Age in seconds of the oldest pending mail (since it was created); 0 when none."),
		OutboxPending:    g("mailsvc_outbox_pending", "Outbox rows not yet published and not dead."),
		OutboxOldestAge:  g("mailsvc_outbox_oldest_age_seconds", "Age in seconds of the oldest unpublished outbox row; 0 when none."),
		OutboxDead:       g("mailsvc_outbox_dead", "Outbox rows the relay gave up on; each needs an operator."),
		LastRefresh:      g("mailsvc_stats_last_refresh_timestamp_seconds", "Unix time of the last successful refresh of the database gauges."),
		RefreshErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_stats_refresh_errors_total", Help: "Refreshes of the database gauges that failed.",
		}),
		Unconfirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_mails_delivery_unconfirmed",
			Help: "Sent mails with no delivery, bounce or complaint report mail.delivery_confirm_after after their send, by provider; 0 for a provider that reports no deliveries.",
		}, []string{"provider"}),
		UnconfirmedRecent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_mails_delivery_unconfirmed_recent",
			Help: "Delivery-unconfirmed mails whose deadline (send + mail.delivery_confirm_after) passed within the last hour, by provider.",
		}, []string{"provider"}),
	}
	for _, s := range mailtype.Statuses {
		m.Mails.WithLabelValues(string(s)).Set(0)
	}
	for _, p := range Providers {
		m.Unconfirmed.WithLabelValues(p).Set(0)
		m.UnconfirmedRecent.WithLabelValues(p).Set(0)
	}
	reg.MustRegister(m.Mails, m.OldestPendingAge, m.OutboxPending, m.OutboxOldestAge, m.OutboxDead, m.LastRefresh, m.RefreshErrors,
		m.Unconfirmed, m.UnconfirmedRecent)
	m.DB = newDBMetrics(reg)
	return m
}

// set copies a snapshot into the gauges.
func (m *Metrics) set(st store.Stats, now time.Time) {
	for _, s := range mailtype.Statuses {
		m.Mails.WithLabelValues(string(s)).Set(float64(st.Mails[s]))
	}
	m.OldestPendingAge.Set(st.OldestPendingAge.Seconds())
	m.OutboxPending.Set(float64(st.OutboxPending))
	m.OutboxOldestAge.Set(st.OutboxOldestAge.Seconds())
	m.OutboxDead.Set(float64(st.OutboxDead))
	for _, p := range Providers {
		m.Unconfirmed.WithLabelValues(p).Set(float64(st.Unconfirmed[p]))
		m.UnconfirmedRecent.WithLabelValues(p).Set(float64(st.UnconfirmedRecent[p]))
	}
	m.LastRefresh.Set(float64(now.UnixNano()) / 1e9)
}

// Options configures a Collector.
type Options struct {
	// Interval between refreshes; 0 means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one refresh query; 0 means Interval.
	Timeout time.Duration
	// AnalyzeInterval is how often a Source that is an Analyzer analyzes
	// its stale tables; 0 means DefaultAnalyzeInterval.
	AnalyzeInterval time.Duration
}

// Collector refreshes Metrics from a Source every Interval. Start and Stop
// follow internal/lifecycle; it is safe for concurrent use.
type Collector struct {
	src  Source
	m    *Metrics
	log  *slog.Logger
	opts Options

	// compactFailing is true while folding the counters fails, so that an
	// episode logs once when it starts and once when it ends.
	compactFailing atomic.Bool
	// analyzeFailing is the same for AnalyzeStale.
	analyzeFailing atomic.Bool

	life lifecycle.Life
}

// New returns a Collector; nothing runs until Start.
func New(src Source, m *Metrics, log *slog.Logger, o Options) *Collector {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = o.Interval
	}
	if o.AnalyzeInterval <= 0 {
		o.AnalyzeInterval = DefaultAnalyzeInterval
	}
	return &Collector{src: src, m: m, log: log.With("component", "stats"), opts: o}
}

// Start refreshes once in the background right away, then every Interval,
// until Stop. It follows the rules of internal/lifecycle: a second Start,
// or one after Stop, returns lifecycle.ErrStarted, and ctx's cancellation
// does not stop the loop. An unreachable database is no error: it is
// logged and counted, and the gauges keep their last values.
func (c *Collector) Start(ctx context.Context) error {
	return c.life.Start(ctx, func(stop, _ context.Context) error {
		c.loop(stop)
		return nil
	})
}

// Stop ends the loop and waits for it until ctx is done (then it returns
// ctx's error). It is idempotent and safe without Start.
func (c *Collector) Stop(ctx context.Context) error {
	return c.life.Stop(ctx)
}

// Done is closed once the loop has ended; Err then says why.
func (c *Collector) Done() <-chan struct{} { return c.life.Done() }

// Err is what ended the loop, nil while it runs (lifecycle.Life.Err).
func (c *Collector) Err() error { return c.life.Err() }

func (c *Collector) loop(ctx context.Context) {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	var analyze <-chan time.Time
	if _, ok := c.src.(Analyzer); ok {
		at := time.NewTicker(c.opts.AnalyzeInterval)
		defer at.Stop()
		analyze = at.C
	}
	c.Refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Refresh(ctx)
		case <-analyze:
			c.analyze(ctx)
		}
	}
}

// analyze asks the source to analyze its stale tables; a failure is
// logged when it starts and when it ends (plans stay as they were).
func (c *Collector) analyze(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	tables, err := c.src.(Analyzer).AnalyzeStale(actx)
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil && !c.analyzeFailing.Swap(true):
		c.log.Warn("analyze stale tables: the planner keeps its old statistics", "error", err)
	case err == nil && c.analyzeFailing.Swap(false):
		c.log.Info("analyze stale tables works again")
	}
	if len(tables) > 0 {
		c.log.Debug("analyzed stale tables", "tables", tables)
	}
}

// Refresh folds the counters' deltas, then runs one query and sets the
// gauges. A failed read is logged and counted and leaves the gauges as
// they were; a failed fold (a read-only database) is logged when it starts
// and when it ends, and the read goes on, exact without it.
func (c *Collector) Refresh(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	c.compact(qctx)
	st, err := c.src.Stats(qctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // shutting down
		}
		c.m.RefreshErrors.Inc()
		c.log.Warn("refresh database gauges", "error", err)
		return
	}
	c.m.set(st, time.Now())
	if hs, ok := c.src.(HealthSource); ok {
		h, err := hs.DBHealth(qctx)
		if err != nil {
			if ctx.Err() == nil {
				c.m.RefreshErrors.Inc()
				c.log.Warn("refresh database health gauges", "error", err)
			}
			return
		}
		c.m.DB.set(h)
	}
}

func (c *Collector) compact(ctx context.Context) {
	_, err := c.src.CompactStatusCounts(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil && !c.compactFailing.Swap(true):
		c.log.Warn("fold mail status counters: the gauges stay exact, the delta table grows until it works", "error", err)
	case err == nil && c.compactFailing.Swap(false):
		c.log.Info("fold mail status counters works again")
	}
}
