package store

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counts are the statements and commits this process's pools sent to
// PostgreSQL since it started: the per-mail budget of docs/benchmarks.md is
// read from them (mailsvc_db_statements_total, mailsvc_db_commits_total).
type Counts struct {
	// Statements counts every statement that completed, in a transaction
	// or not, except BEGIN, COMMIT and ROLLBACK.
	Statements uint64
	// Commits counts the transactions that committed: each COMMIT, each
	// statement run outside a transaction (autocommit) and each batch
	// without BEGIN that ended outside one (a pipelined batch is one
	// implicit transaction). A read-only statement counts too, as it does
	// in pg_stat_database.xact_commit.
	Commits uint64
}

// counter is the pgx tracer that keeps Counts for every pool of the
// process (Open and OpenRelay share it through the pool's configuration).
type counter struct{ statements, commits atomic.Uint64 }

// dbCounts is the process's one counter: the pools are the process's.
var dbCounts counter

// DBCounts returns what this process's pools have sent so far.
func DBCounts() Counts {
	return Counts{Statements: dbCounts.statements.Load(), Commits: dbCounts.commits.Load()}
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *counter) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil {
		return
	}
	switch tx := txControl(d.CommandTag.String()); {
	case tx == "COMMIT":
		c.commits.Add(1)
	case tx != "":
	default:
		c.statements.Add(1)
		if conn.PgConn().TxStatus() == 'I' {
			c.commits.Add(1)
		}
	}
}

// batchState is what a batch has shown so far: whether it opened or closed
// a transaction itself.
type batchState struct{ explicit bool }

type batchKey struct{}

func (c *counter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	// A batch sent inside a transaction commits nothing by itself.
	return context.WithValue(ctx, batchKey{}, &batchState{explicit: conn.PgConn().TxStatus() != 'I'})
}

func (c *counter) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err != nil {
		return
	}
	st, _ := ctx.Value(batchKey{}).(*batchState)
	switch tx := txControl(d.CommandTag.String()); {
	case tx == "COMMIT":
		c.commits.Add(1)
		if st != nil {
			st.explicit = true
		}
	case tx != "":
		if st != nil {
			st.explicit = true
		}
	default:
		c.statements.Add(1)
	}
}

func (c *counter) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	st, _ := ctx.Value(batchKey{}).(*batchState)
	if d.Err == nil && st != nil && !st.explicit && conn.PgConn().TxStatus() == 'I' {
		c.commits.Add(1)
	}
}

// txControl returns the transaction-control command of a command tag
// (BEGIN, COMMIT, ROLLBACK), "" for any other statement.
func txControl(tag string) string {
	switch t := strings.ToUpper(tag); t {
	case "BEGIN", "COMMIT", "ROLLBACK":
		return t
	}
	return ""
}
