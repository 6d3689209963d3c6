package bench

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// budget is a run's cost per mail in counts that the machine's load cannot
// move: the statements and commits the pipeline process sent PostgreSQL
// (mailsvc counts its own, store.DBCounts; 0 where a system does not
// count) and the WAL the server wrote (the whole server's, so other users
// of it count too: run on a quiet server).
type budget struct {
	statements, commits, walBytes float64
}

// budgetGoals are issue-set ceilings per mail for mailsvc's defaults: at
// full speed, and at benchRate events/s (no WAL ceiling there).
var budgetGoals = struct{ full, paced budget }{
	full:  budget{statements: 0.35, commits: 0.3, walBytes: 6500},
	paced: budget{statements: 3.5, commits: 2.2},
}

// budgetMark is a reading taken before a run: the process's counters and
// the server's WAL position.
type budgetMark struct {
	counts budget
	wal    float64
}

// markBudget reads the counters of sys (when it counts) and the WAL
// position of the server.
func markBudget(b *testing.B, sys *system, sc *storetest.Schema) budgetMark {
	var m budgetMark
	if sys.dbCounts != nil {
		m.counts = sys.dbCounts(b)
	}
	m.wal = float64(sc.QueryInt(b, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`))
	return m
}

// since is the cost per mail of n mails from before to now.
func (before budgetMark) since(b *testing.B, sys *system, sc *storetest.Schema, n int) budget {
	now := markBudget(b, sys, sc)
	per := func(a, z float64) float64 { return (z - a) / float64(n) }
	out := budget{walBytes: per(before.wal, now.wal)}
	if sys.dbCounts != nil {
		out.statements = per(before.counts.statements, now.counts.statements)
		out.commits = per(before.counts.commits, now.counts.commits)
	}
	return out
}

func (u budget) add(v budget) budget {
	return budget{u.statements + v.statements, u.commits + v.commits, u.walBytes + v.walBytes}
}

func (u budget) scale(f float64) budget {
	return budget{u.statements * f, u.commits * f, u.walBytes * f}
}

// servesDBCounts reads mailsvc_db_statements_total and
// mailsvc_db_commits_total from a /metrics page.
func servesDBCounts(b *testing.B, page string) budget {
	var u budget
	found := 0
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		dst := map[string]*float64{"mailsvc_db_statements_total": &u.statements, "mailsvc_db_commits_total": &u.commits}[name]
		if dst == nil {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(b, err, "metric %s", name)
		*dst = v
		found++
	}
	require.Equal(b, 2, found, "mailsvc_db_statements_total and mailsvc_db_commits_total on /metrics")
	return u
}

// budgetCols formats a budget: statements and commits per mail ("-" where
// the system does not count them), WAL in bytes per mail.
func budgetCols(u budget) string {
	return fmt.Sprintf("%6s %6s %7.0f", orDash("%.3f", u.statements), orDash("%.3f", u.commits), u.walBytes)
}
