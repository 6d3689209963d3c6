package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/store"
)

// dbCountCollectors export store.DBCounts: the statements and commits this
// process sent to PostgreSQL, the per-mail budget's numerators
// (docs/benchmarks.md).
func dbCountCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mailsvc_db_statements_total",
			Help: "Statements this process completed on PostgreSQL (BEGIN, COMMIT and ROLLBACK not counted)."},
			func() float64 { return float64(store.DBCounts().Statements) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mailsvc_db_commits_total",
			Help: "Transactions this process committed on PostgreSQL, autocommit statements included."},
			func() float64 { return float64(store.DBCounts().Commits) }),
	}
}
