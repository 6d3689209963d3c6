package store

import (
	"context"
	"fmt"
	"slices"

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

// analyzeMinRows and analyzeGrowth make a table stale once it holds at
// least analyzeMinRows rows and more than analyzeGrowth times the rows it
// had at its last analyze (pg_class.reltuples, by autovacuum or anyone;
// -1 before the first). A plan goes stale as a table grows, not as its
// rows change status: counting changes (three updates per mail) had a
// fresh table analyzed every few hundred mails. Over a table's life from
// empty to a million rows this is about ten analyzes.
const (
	analyzeMinRows = 1000
	analyzeGrowth  = 2
)

// staleTablesSQL lists the hot tables of the current schema whose
// statistics are stale by that rule (n_live_tup is kept by the statistics
// system as rows are inserted and deleted, analyze or not) and that the
// session may analyze: as the table's owner or the database's (a member
// of either role, a superuser), or, from PostgreSQL 17, with the MAINTAIN
// privilege (a privilege name older servers refuse, hence the CASE).
// ANALYZE of another's table is skipped with a WARNING in the server's
// log, which asking every second would repeat every second.
const staleTablesSQL = `
SELECT c.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.relname IN ('mail', 'outbox')
  AND s.n_live_tup >= $1 AND s.n_live_tup > $2 * GREATEST(c.reltuples, 0)
  AND (pg_has_role(c.relowner, 'USAGE')
       OR pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)
ORDER BY c.relname`

// AnalyzeStale runs ANALYZE on each hot table (mail, outbox) whose
// statistics are stale (see analyzeMinRows) and returns the tables it
// analyzed, in name order; none when autovacuum keeps up. ANALYZE samples
// at most 30,000 rows (default_statistics_target 100) and, since
// migration 00130, skips the rendered content and the payloads; it still
// reads up to 30,000 pages (measured: about half a second on 100,000
// rows of 400 bytes on a loaded 2-core machine), and the rule makes it
// rarer as a table grows. The counters it reads are flushed by each
// backend about once a second, so a table is seen stale up to a second
// late. A table whose analyze lock another session holds (another replica
// analyzing it, autovacuum vacuuming it) is skipped, not waited for: a
// waiting ANALYZE would analyze again what was just analyzed, and after
// deadlock_timeout PostgreSQL cancels an autovacuum that blocks it. The
// server logs a WARNING for each such skip; the table, still stale, is
// not among those returned. Only the tables' owner may analyze them (or
// the database's owner; from PostgreSQL 17 a role with the MAINTAIN
// privilege): mailsvc's role is the owner when it ran the migrations.
// Another role leaves the tables to autovacuum and reports none analyzed.
// Database errors are classified (interpretError).
func (s *Store) AnalyzeStale(ctx context.Context) ([]string, error) {
	tables, err := s.staleTables(ctx)
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	for i, t := range tables {
		// The names come from the fixed list above, never from input.
		if _, err := s.pool.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+pgx.Identifier{t}.Sanitize()); err != nil {
			return tables[:i], fmt.Errorf("analyze %s: %w", t, interpretError(err))
		}
	}
	still, err := s.staleTables(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(tables, func(t string) bool { return slices.Contains(still, t) }), nil
}

// staleTables runs staleTablesSQL.
func (s *Store) staleTables(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, staleTablesSQL, analyzeMinRows, analyzeGrowth)
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", interpretError(err))
	}
	return tables, nil
}
