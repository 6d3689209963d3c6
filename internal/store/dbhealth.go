package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HealthTables are mailsvc's tables, the ones DBHealth reports on. A
// migration that creates a table adds it here (TestHealthTablesAreTheSchema
// compares the list with a migrated schema).
var HealthTables = []string{
	"audit_log", "console_session", "mail", "mail_attachment", "mail_attempt", "mail_status_delta", "mail_status_total", "mailsvc_meta", "outbox", "provider_state",
	"recipient_window", "relay_lease", "suppression", "suppression_event", "webhook_event",
}

// TableHealth is what PostgreSQL's statistics say about one table.
type TableHealth struct {
	Table string
	// SizeBytes is pg_total_relation_size: the heap, its TOAST and every
	// index, in bytes.
	SizeBytes int64
	// LiveTuples and DeadTuples are the statistics system's estimates
	// (pg_stat_user_tables.n_live_tup, n_dead_tup): dead row versions wait
	// for a vacuum.
	LiveTuples, DeadTuples int64
	// LastVacuum and LastAnalyze are the latest manual or automatic
	// vacuum and analyze; nil when none ran since the statistics were
	// reset (a fresh server, a small table autovacuum never needed).
	LastVacuum, LastAnalyze *time.Time
}

// StandbyLag is how far one streaming standby is behind the primary.
type StandbyLag struct {
	// Name is the standby's application_name.
	Name string
	// ReplayLag is pg_stat_replication.replay_lag: the time until a commit
	// on the primary is visible on the standby; 0 when the standby is
	// caught up and idle (PostgreSQL then reports none).
	ReplayLag time.Duration
}

// DBHealth is one read of the database's health as mailsvc sees it.
type DBHealth struct {
	Tables   []TableHealth
	Standbys []StandbyLag
	// Now is the database's clock at the read (zero when no table of
	// HealthTables exists in the schema).
	Now time.Time
}

// tableHealthSQL reads the statistics of HealthTables in the current
// schema: one catalog read, no table scan (pg_total_relation_size asks the
// file sizes of each relation's forks).
const tableHealthSQL = `
SELECT s.relname, pg_total_relation_size(s.relid), s.n_live_tup, s.n_dead_tup,
       GREATEST(s.last_vacuum, s.last_autovacuum), GREATEST(s.last_analyze, s.last_autoanalyze), now()
FROM pg_stat_user_tables s
WHERE s.schemaname = current_schema() AND s.relname = ANY($1)
ORDER BY s.relname`

// standbyLagSQL reads the primary's streaming standbys. A role without
// pg_monitor (or superuser) sees another role's rows with their state
// hidden (NULL): those are left out rather than reported caught up.
const standbyLagSQL = `
SELECT COALESCE(application_name, ''), COALESCE(EXTRACT(EPOCH FROM replay_lag), 0)::float8
FROM pg_stat_replication
WHERE state IS NOT NULL
ORDER BY application_name`

// DBHealth reads the size, dead rows and last vacuum and analyze of
// mailsvc's tables and the lag of each streaming standby of the primary
// (none without one, or without the pg_monitor role), in two short
// statements on PostgreSQL's statistics views. An unreachable database
// is a transient *mailtype.Error (ReasonDatabase).
func (s *Store) DBHealth(ctx context.Context) (DBHealth, error) {
	var h DBHealth
	rows, err := s.pool.Query(ctx, tableHealthSQL, HealthTables)
	if err != nil {
		return h, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	h.Tables, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableHealth, error) {
		var t TableHealth
		err := r.Scan(&t.Table, &t.SizeBytes, &t.LiveTuples, &t.DeadTuples, &t.LastVacuum, &t.LastAnalyze, &h.Now)
		return t, err
	})
	if err != nil {
		return h, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	rows, err = s.pool.Query(ctx, standbyLagSQL)
	if err != nil {
		return h, fmt.Errorf("read replication lag: %w", interpretError(err))
	}
	h.Standbys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StandbyLag, error) {
		var l StandbyLag
		var secs float64
		err := r.Scan(&l.Name, &secs)
		l.ReplayLag = time.Duration(secs * float64(time.Second))
		return l, err
	})
	if err != nil {
		return h, fmt.Errorf("read replication lag: %w", interpretError(err))
	}
	return h, nil
}
