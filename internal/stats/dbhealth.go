package stats

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/store"
)

// DBMetrics are the database health gauges, by table of
// store.HealthTables and by standby, read from PostgreSQL's statistics
// views with every refresh (docs/design.md, "Metrics").
type DBMetrics struct {
	// TableSize is mailsvc_db_table_size_bytes{table}: heap, TOAST and
	// indexes, in bytes.
	TableSize *prometheus.GaugeVec
	// LiveTuples and DeadTuples are mailsvc_db_table_live_tuples{table}
	// and mailsvc_db_table_dead_tuples{table}: the statistics system's
	// row estimates; dead rows wait for a vacuum.
	LiveTuples, DeadTuples *prometheus.GaugeVec
	// VacuumAge and AnalyzeAge are mailsvc_db_table_vacuum_age_seconds
	// {table} and mailsvc_db_table_analyze_age_seconds{table}: the time
	// since the last manual or automatic vacuum and analyze; absent for a
	// table none ran on since the statistics were reset.
	VacuumAge, AnalyzeAge *prometheus.GaugeVec
	// ReplicationLag is mailsvc_db_replication_lag_seconds{standby}: each
	// streaming standby's replay lag; no series without a standby (or
	// without the pg_monitor role to see it).
	ReplicationLag *prometheus.GaugeVec

	mu       sync.Mutex // Refresh may run beside the loop's: one set at a time
	standbys []string   // the standbys of the last set
}

func newDBMetrics(reg prometheus.Registerer) *DBMetrics {
	vec := func(name, help, label string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{label})
	}
	m := &DBMetrics{
		TableSize:  vec("mailsvc_db_table_size_bytes", "Size of each mailsvc table with its TOAST and indexes, in bytes.", "table"),
		LiveTuples: vec("mailsvc_db_table_live_tuples", "Live rows of each mailsvc table (PostgreSQL's estimate).", "table"),
		DeadTuples: vec("mailsvc_db_table_dead_tuples", "Dead row versions of each mailsvc table, waiting for a vacuum (PostgreSQL's estimate).", "table"),
		VacuumAge: vec("mailsvc_db_table_vacuum_age_seconds",
			"Seconds since the last vacuum (manual or autovacuum) of each mailsvc table; absent when none ran.", "table"),
		AnalyzeAge: vec("mailsvc_db_table_analyze_age_seconds",
			"Seconds since the last analyze (manual or autovacuum) of each mailsvc table; absent when none ran.", "table"),
		ReplicationLag: vec("mailsvc_db_replication_lag_seconds",
			"Replay lag of each streaming standby of the primary, in seconds (needs the pg_monitor role).", "standby"),
	}
	for _, t := range store.HealthTables {
		m.TableSize.WithLabelValues(t).Set(0)
		m.LiveTuples.WithLabelValues(t).Set(0)
		m.DeadTuples.WithLabelValues(t).Set(0)
	}
	reg.MustRegister(m.TableSize, m.LiveTuples, m.DeadTuples, m.VacuumAge, m.AnalyzeAge, m.ReplicationLag)
	return m
}

// set copies a health read into the gauges. An age with no vacuum or
// analyze, and a standby no longer streaming, lose their series; every
// other series is overwritten in place, so a scrape never misses one.
func (m *DBMetrics) set(h store.DBHealth) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range h.Tables {
		m.TableSize.WithLabelValues(t.Table).Set(float64(t.SizeBytes))
		m.LiveTuples.WithLabelValues(t.Table).Set(float64(t.LiveTuples))
		m.DeadTuples.WithLabelValues(t.Table).Set(float64(t.DeadTuples))
		setAge(m.VacuumAge, t.Table, h, t.LastVacuum)
		setAge(m.AnalyzeAge, t.Table, h, t.LastAnalyze)
	}
	streaming := map[string]bool{}
	for _, s := range h.Standbys {
		streaming[s.Name] = true
		m.ReplicationLag.WithLabelValues(s.Name).Set(s.ReplayLag.Seconds())
	}
	for _, name := range m.standbys {
		if !streaming[name] {
			m.ReplicationLag.DeleteLabelValues(name)
		}
	}
	m.standbys = slices.Collect(maps.Keys(streaming))
}

// setAge sets table's series of v to the seconds from at to h.Now, or
// removes it when at is nil.
func setAge(v *prometheus.GaugeVec, table string, h store.DBHealth, at *time.Time) {
	if at == nil {
		v.DeleteLabelValues(table)
		return
	}
	v.WithLabelValues(table).Set(h.Now.Sub(*at).Seconds())
}
