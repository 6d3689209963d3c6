package stats

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
)

// A standby that stops streaming, and a table whose statistics were
// reset, lose their series; the others keep theirs with the new values.
func TestDBMetricsFollowTheStandbysAndResets(t *testing.T) {
	m := newDBMetrics(prometheus.NewRegistry())
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	vacuumed := now.Add(-90 * time.Second)
	m.set(store.DBHealth{Now: now,
		Tables:   []store.TableHealth{{Table: "mail", SizeBytes: 8192, LiveTuples: 60, DeadTuples: 40, LastVacuum: &vacuumed}},
		Standbys: []store.StandbyLag{{Name: "a", ReplayLag: 2 * time.Second}, {Name: "b", ReplayLag: 90 * time.Second}}})
	require.Equal(t, 90.0, testutil.ToFloat64(m.VacuumAge.WithLabelValues("mail")))
	require.Equal(t, 40.0, testutil.ToFloat64(m.DeadTuples.WithLabelValues("mail")))
	require.Equal(t, 2, testutil.CollectAndCount(m.ReplicationLag))
	require.Equal(t, 90.0, testutil.ToFloat64(m.ReplicationLag.WithLabelValues("b")))

	m.set(store.DBHealth{Now: now, Tables: []store.TableHealth{{Table: "mail", SizeBytes: 8192, LiveTuples: 60}},
		Standbys: []store.StandbyLag{{Name: "a", ReplayLag: 0}}})
	require.Equal(t, 0, testutil.CollectAndCount(m.VacuumAge), "no vacuum since the statistics were reset")
	require.Equal(t, 1, testutil.CollectAndCount(m.ReplicationLag), "b stopped streaming")
	require.Equal(t, 0.0, testutil.ToFloat64(m.ReplicationLag.WithLabelValues("a")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.DeadTuples.WithLabelValues("mail")))
}
