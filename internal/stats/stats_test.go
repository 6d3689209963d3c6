package stats_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	sc  *storetest.Schema
	reg *prometheus.Registry
	m   *stats.Metrics
	log *bytes.Buffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	return &bundle{sc: storetest.New(t), reg: reg, m: stats.NewMetrics(reg), log: &bytes.Buffer{}}
}

func (b *bundle) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b.log, nil)) }

// val reads a gauge or counter.
func val(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

func TestEveryGaugeIsPreInitialised(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	stats.NewMetrics(reg)
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]int{}
	for _, f := range fams {
		got[f.GetName()] = len(f.GetMetric())
	}
	require.Equal(t, map[string]int{
		"mailsvc_mails": 7, "mailsvc_oldest_pending_age_seconds": 1, "mailsvc_outbox_pending": 1,
		"mailsvc_outbox_oldest_age_seconds": 1, "mailsvc_outbox_dead": 1,
		"mailsvc_stats_last_refresh_timestamp_seconds": 1, "mailsvc_stats_refresh_errors_total": 1,
		"mailsvc_mails_delivery_unconfirmed": 2, "mailsvc_mails_delivery_unconfirmed_recent": 2,
		"mailsvc_db_table_size_bytes": len(store.HealthTables), "mailsvc_db_table_live_tuples": len(store.HealthTables),
		"mailsvc_db_table_dead_tuples": len(store.HealthTables),
	}, got)
}

// The delivery-unconfirmed gauges count, by provider, the mails the
// store's rule flags: only Resend's here, three in all, one of which
// passed its deadline within the hour; smtp stays 0 (it reports nothing).
func TestRefreshSetsUnconfirmedGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, provider, sent_at, delivered_at)
		VALUES ('r1', '1', 'order_confirmed', 'sent', 'resend', now() - interval '3 hours', NULL),
		       ('r2', '2', 'order_confirmed', 'sent', 'resend', now() - interval '4 hours', NULL),
		       ('r3', '3', 'order_confirmed', 'sent', 'resend', now() - interval '70 minutes', NULL),
		       ('r4', '4', 'order_confirmed', 'sent', 'resend', now() - interval '5 minutes', NULL),
		       ('r5', '5', 'order_confirmed', 'sent', 'resend', now() - interval '3 hours', now()),
		       ('s1', '6', 'order_confirmed', 'sent', 'smtp', now() - interval '3 hours', NULL)`)
	st := b.sc.Open(t, store.Options{DeliveryConfirm: store.DeliveryConfirm{Providers: []string{"resend"}, After: time.Hour}})
	c := stats.New(st, b.m, b.logger(), stats.Options{Interval: time.Hour, Timeout: 10 * time.Second})
	c.Refresh(context.Background())
	require.Equal(t, 0.0, val(b.m.RefreshErrors))
	require.Equal(t, 3.0, val(b.m.Unconfirmed.WithLabelValues("resend")))
	require.Equal(t, 1.0, val(b.m.UnconfirmedRecent.WithLabelValues("resend")))
	require.Equal(t, 0.0, val(b.m.Unconfirmed.WithLabelValues("smtp")))
	require.Equal(t, 0.0, val(b.m.UnconfirmedRecent.WithLabelValues("smtp")))

	b.sc.Exec(t, `UPDATE mail SET delivered_at = now() WHERE dedupe_key IN ('r1', 'r3')`)
	c.Refresh(context.Background())
	require.Equal(t, 1.0, val(b.m.Unconfirmed.WithLabelValues("resend")), "a late report clears the flag")
	require.Equal(t, 0.0, val(b.m.UnconfirmedRecent.WithLabelValues("resend")))
}

func TestCollectorSetsGaugesFromOneQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, created_at)
		SELECT 'k'||g||s||random(), g::text, 'order_confirmed', s, now() - interval '2 minutes'
		FROM generate_series(1, 6) g, unnest(ARRAY['pending','sent','sent']) s`)
	b.sc.Exec(t, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, payload, created_at, dead_at)
		VALUES (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now() - interval '1 minute', NULL),
		       (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now(), now())`)
	// A refresh every 50 ms, each allowed 10 s: a query slowed by a busy
	// machine is no refresh error, and the test is about the values.
	c := stats.New(b.sc.Store, b.m, b.logger(), stats.Options{Interval: 50 * time.Millisecond, Timeout: 10 * time.Second})
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })

	require.Eventually(t, func() bool { return val(b.m.Mails.WithLabelValues("sent")) == 12 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 6.0, val(b.m.Mails.WithLabelValues("pending")))
	require.Equal(t, 0.0, val(b.m.Mails.WithLabelValues("unknown")))
	require.InDelta(t, 120, val(b.m.OldestPendingAge), 15)
	require.Equal(t, 1.0, val(b.m.OutboxPending))
	require.InDelta(t, 60, val(b.m.OutboxOldestAge), 15)
	require.Equal(t, 1.0, val(b.m.OutboxDead))
	require.InDelta(t, float64(time.Now().Unix()), val(b.m.LastRefresh), 15)

	// The next refresh sees a change: the gauges follow the table.
	b.sc.Exec(t, `UPDATE mail SET status = 'unknown' WHERE status = 'pending'`)
	require.Eventually(t, func() bool { return val(b.m.Mails.WithLabelValues("unknown")) == 6 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 0.0, val(b.m.Mails.WithLabelValues("pending")))
	require.Equal(t, 0.0, val(b.m.OldestPendingAge))
	require.Equal(t, 0.0, val(b.m.RefreshErrors))
}

func TestDatabaseCutKeepsLastValuesAndCountsErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status) VALUES ('k', '1', 'order_confirmed', 'failed')`)
	px := testproxy.New(t, testproxy.HostPort(t, b.sc.URL, "5432"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: px.RewriteURL(t, b.sc.URL), MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	c := stats.New(st, b.m, b.logger(), stats.Options{Interval: time.Hour, Timeout: 5 * time.Second})

	c.Refresh(ctx)
	require.Equal(t, 1.0, val(b.m.Mails.WithLabelValues("failed")))
	px.Cut()
	c.Refresh(ctx)
	require.Equal(t, 1.0, val(b.m.RefreshErrors))
	require.Equal(t, 1.0, val(b.m.Mails.WithLabelValues("failed")), "last value kept")
	require.Contains(t, b.log.String(), `"msg":"refresh database gauges"`)
	px.Restore(t)
	b.sc.Exec(t, `UPDATE mail SET status = 'sent'`)
	require.Eventually(t, func() bool {
		c.Refresh(ctx)
		return val(b.m.Mails.WithLabelValues("sent")) == 1
	}, 10*time.Second, 50*time.Millisecond, "recovers by itself once the database is back")
	require.Equal(t, 0.0, val(b.m.Mails.WithLabelValues("failed")))
}

func TestStopIsIdempotentAndSafeWithoutStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := stats.New(nil, stats.NewMetrics(reg), slog.New(slog.DiscardHandler), stats.Options{})
	require.NoError(t, c.Stop(context.Background()))
	require.NoError(t, c.Stop(context.Background()))
}

// Each refresh folds the deltas of the finished-mail counters first, so
// the delta table stays small; the gauges are exact before and after.
func TestRefreshFoldsTheCounters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status) SELECT 'k' || g, g::text, 'order_confirmed', 'sent' FROM generate_series(1, 5) g`)
	b.sc.Exec(t, `UPDATE mail SET status = 'failed' WHERE order_id IN ('1', '2')`)
	require.EqualValues(t, 9, b.sc.QueryInt(t, `SELECT count(*) FROM mail_status_delta`), "a delta row per finished insert, two per move between finished statuses")
	c := stats.New(b.sc.Store, b.m, b.logger(), stats.Options{Interval: time.Hour, Timeout: 5 * time.Second})
	c.Refresh(context.Background())
	require.Equal(t, 3.0, val(b.m.Mails.WithLabelValues("sent")))
	require.Equal(t, 2.0, val(b.m.Mails.WithLabelValues("failed")))
	require.EqualValues(t, 0, b.sc.QueryInt(t, `SELECT count(*) FROM mail_status_delta`), "folded")
	require.Equal(t, map[string]string{"sent": "3", "failed": "2", "cancelled": "0"}, b.sc.QueryMap(t, `SELECT status, n::text FROM mail_status_total`))
}

// flakyFold is a Source whose fold fails while failing is set.
type flakyFold struct {
	failing bool
}

func (f *flakyFold) Stats(context.Context) (store.Stats, error) {
	return store.Stats{Mails: map[mailtype.Status]int64{mailtype.StatusSent: 7}}, nil
}

func (f *flakyFold) CompactStatusCounts(context.Context) (int64, error) {
	if f.failing {
		return 0, errors.New("cannot execute INSERT in a read-only transaction")
	}
	return 0, nil
}

// A database that refuses the fold (read-only) still gets its gauges
// read; the failure is logged once when it starts and once when it ends.
func TestFoldFailureLogsOnceAndTheGaugesGoOn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := stats.NewMetrics(reg)
	var logs bytes.Buffer
	src := &flakyFold{failing: true}
	c := stats.New(src, m, slog.New(slog.NewJSONHandler(&logs, nil)), stats.Options{Interval: time.Hour})
	for range 3 {
		c.Refresh(context.Background())
	}
	require.Equal(t, 7.0, val(m.Mails.WithLabelValues("sent")))
	require.Equal(t, 0.0, val(m.RefreshErrors), "the gauges are not frozen")
	require.Equal(t, 1, strings.Count(logs.String(), `"msg":"fold mail status counters: the gauges stay exact, the delta table grows until it works"`))
	src.failing = false
	c.Refresh(context.Background())
	c.Refresh(context.Background())
	require.Equal(t, 1, strings.Count(logs.String(), `"msg":"fold mail status counters works again"`))
}

// analyzingSource is a Source that is also an Analyzer; it counts the
// calls and fails them while failing is set.
type analyzingSource struct {
	flakyFold
	calls   atomic.Int64
	failing atomic.Bool
}

func (a *analyzingSource) AnalyzeStale(context.Context) ([]string, error) {
	a.calls.Add(1)
	if a.failing.Load() {
		return nil, errors.New("permission denied")
	}
	return []string{"mail"}, nil
}

// A source that can analyze is asked every AnalyzeInterval, apart from
// the refreshes; a failing analyze is logged once per episode.
func TestCollectorAnalyzesStaleTables(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	src := &analyzingSource{}
	src.failing.Store(true)
	c := stats.New(src, stats.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(&logs, nil)),
		stats.Options{Interval: time.Hour, AnalyzeInterval: 5 * time.Millisecond})
	require.NoError(t, c.Start(context.Background()))
	require.Eventually(t, func() bool { return src.calls.Load() >= 3 }, 10*time.Second, time.Millisecond)
	src.failing.Store(false)
	n := src.calls.Load()
	require.Eventually(t, func() bool { return src.calls.Load() >= n+2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Stop(context.Background()))
	require.Equal(t, 1, strings.Count(logs.String(), "analyze stale tables: the planner keeps its old statistics"))
	require.Equal(t, 1, strings.Count(logs.String(), "analyze stale tables works again"))
}

// syncBuffer is a bytes.Buffer safe for the collector's goroutine and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A refresh reads the tables' statistics from the real server: mail's
// rows and size, and its vacuum's age once one ran. (The exact counts are
// the store's test, TestDBHealthReadsTheStatistics: here, that the
// gauges follow the read; a vacuum's count depends on the whole server's
// oldest snapshot, which other tests hold.)
func TestRefreshSetsDatabaseHealthGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status)
		SELECT 'h' || g, g::text, 'order_confirmed', 'sent' FROM generate_series(1, 30) g`)
	b.sc.Exec(t, `VACUUM mail`)
	c := stats.New(b.sc.Store, b.m, b.logger(), stats.Options{Interval: time.Hour, Timeout: 10 * time.Second})
	// A backend's table counters reach the statistics views within a second.
	require.Eventually(t, func() bool {
		c.Refresh(context.Background())
		return val(b.m.DB.LiveTuples.WithLabelValues("mail")) > 0 && testutil.CollectAndCount(b.m.DB.VacuumAge) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 0.0, val(b.m.RefreshErrors))
	require.Positive(t, val(b.m.DB.TableSize.WithLabelValues("mail")))
	require.Equal(t, 1, testutil.CollectAndCount(b.m.DB.VacuumAge), "only mail was vacuumed")
	require.InDelta(t, 0, val(b.m.DB.VacuumAge.WithLabelValues("mail")), 60)
	require.Equal(t, 0, testutil.CollectAndCount(b.m.DB.ReplicationLag), "no standby streams from the test server")
}
