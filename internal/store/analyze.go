package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Planner statistics of the hot tables. The statements on mail and outbox
// are prepared once per connection, and PostgreSQL keeps a prepared
// statement's generic plan until the table's statistics change. A plan
// made while a table was small (a fresh schema, the first minutes after a
// deployment) scans the whole table; without statistics the planner also
// prefers the partial indexes on status, which fill with dead entries
// between vacuums, to the primary key (measured: one send-started mark
// visited 1,000 heap pages for one row). Autovacuum's analyze refreshes
// the statistics, and so the plans, as a table grows; on a server where it
// is off or behind, AnalyzeStale does the same.

// analyzeMinChanges and analyzeScale make a table stale once its changes
// since the last analyze (by autovacuum or anyone) exceed
// analyzeMinChanges + analyzeScale x its live rows: laxer than
// autovacuum's default (50 + 0.1 x rows), so that with autovacuum on this
// rarely fires, while a fresh table is analyzed after its first 1,000
// changes and again as it grows by half.
const (
	analyzeMinChanges = 1000
	analyzeScale      = 0.5
)

// staleTablesSQL lists the hot tables of the current schema whose
// statistics are stale by that rule.
const staleTablesSQL = `
SELECT relname FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname IN ('mail', 'outbox')
  AND n_mod_since_analyze > $1 + $2 * GREATEST(n_live_tup, 0)
ORDER BY relname`

// AnalyzeStale runs ANALYZE on each hot table (mail, outbox) whose
// statistics are stale (see analyzeMinChanges) and returns the tables it
// analyzed, in name order; none when autovacuum keeps up. ANALYZE samples
// at most 30,000 rows (default_statistics_target 100) and, since
// migration 00130, skips the rendered content and the payloads, so one
// costs milliseconds to tens of milliseconds whatever the table's size,
// and the rule makes them rarer as a table grows. The counters it reads are flushed by each
// backend about once a second, so a table is seen stale up to a second
// late. Only the tables' owner may analyze them (PostgreSQL 15; mailsvc's
// role is when it ran the migrations): for another role the server skips
// the table with a warning, and the table stays stale. Database errors are
// classified (interpretError).
func (s *Store) AnalyzeStale(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, staleTablesSQL, analyzeMinChanges, analyzeScale)
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	for i, t := range tables {
		// The names come from the fixed list above, never from input.
		if _, err := s.pool.Exec(ctx, "ANALYZE "+pgx.Identifier{t}.Sanitize()); err != nil {
			return tables[:i], fmt.Errorf("analyze %s: %w", t, interpretError(err))
		}
	}
	return tables, nil
}
