package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrTransactionPooling is what CheckPooling's refusals wrap: the URL leads
// to a pooler that shares server sessions between clients per transaction
// (PgBouncer's pool_mode = transaction or statement, or another transaction
// pooler), and the use asked for needs session state there.
var ErrTransactionPooling = errors.New("transaction pooling")

// Pooling is what ProbePooling saw of the server sessions behind the URL.
type Pooling struct {
	// Shared is true when one server session served two client connections,
	// or one client connection was served by two server sessions: a
	// transaction pooler is in between. Session state (LISTEN, session
	// advisory locks, SET) does not follow a connection there. False is
	// what a direct connection and a session-mode pool show; a transaction
	// pooler that happened to keep each client on one server for the whole
	// probe shows it too (the probe cannot tell then).
	Shared bool
	// CachesStatements is true when the URL's exec mode is pgx's default,
	// cache_statement, which prepares named statements ("stmtcache_…") on
	// each server session it believes it holds.
	CachesStatements bool
	// StatementsBreak is true when, through a Shared pooler, a named
	// prepared statement of one client was found on another's server
	// session (42P05) or missing from its own (26000): the pooler does not
	// carry prepared statements (PgBouncer before 1.21, or with
	// max_prepared_statements = 0). Probed only when Shared and
	// CachesStatements.
	StatementsBreak bool
}

// probeRounds is the order in which the two probe connections ask for
// their server session's pid: each asks twice in a row once, so a pooler
// that hands out the oldest idle server (PgBouncer's server_round_robin)
// moves a client to another server, and one that hands out the newest
// (PgBouncer's default, LIFO) gives the second client the first one's.
var probeRounds = []int{0, 1, 0, 0, 1, 1, 0, 1}

// ProbePooling opens two connections of its own with the pool's settings
// (closed before it returns) and finds out whether server sessions are
// shared per transaction behind the URL, and if so, and the URL caches
// statements, whether named prepared statements survive it. It costs
// about a dozen round trips. Errors are those of connecting and querying,
// classified as every store error.
func (s *Store) ProbePooling(ctx context.Context) (Pooling, error) {
	cfg := s.pool.Config().ConnConfig
	p := Pooling{CachesStatements: cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement}
	var conns [2]*pgx.Conn
	for i := range conns {
		c, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return p, fmt.Errorf("probe connection pooling: %w", interpretError(err))
		}
		defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()
		conns[i] = c
	}
	seen := map[uint32]int{} // server pid → client index that saw it first
	for _, i := range probeRounds {
		var pid uint32
		if err := conns[i].QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
			return p, fmt.Errorf("probe connection pooling: %w", interpretError(err))
		}
		if first, ok := seen[pid]; ok && first != i {
			p.Shared = true
		}
		seen[pid] = i
	}
	// A client kept by its server saw one pid; two clients, two pids.
	p.Shared = p.Shared || len(seen) != 2
	if !p.Shared || !p.CachesStatements {
		return p, nil
	}
	broke, err := statementsBreak(ctx, conns)
	p.StatementsBreak = broke
	return p, err
}

// statementsBreak prepares one named statement on the first connection
// and runs it there twice, then prepares it on the second and runs it on
// each: through a pooler that does not carry prepared statements, a
// pooler that rotates its server sessions runs an execution on one that
// lacks the statement (26000), and one that hands out the server just
// released (LIFO) takes the second Parse to the first one's session
// (42P05). The name is new for each probe, so leftovers of an earlier
// probe on the pooler's server sessions do not count.
func statementsBreak(ctx context.Context, conns [2]*pgx.Conn) (bool, error) {
	a, b := conns[0], conns[1]
	name := "mailsvc_probe_" + uuid.NewString()[:8]
	steps := []struct {
		c       *pgx.Conn
		prepare bool
	}{{a, true}, {a, false}, {a, false}, {b, true}, {b, false}, {a, false}, {b, false}}
	for _, st := range steps {
		var err error
		if st.prepare {
			_, err = st.c.Prepare(ctx, name, "SELECT 1")
		} else {
			_, err = st.c.Exec(ctx, name)
		}
		if err != nil {
			return isStatementLoss(err), ignoreStatementLoss(err)
		}
	}
	return false, nil
}

// isStatementLoss tells a duplicate (42P05) or missing (26000) prepared
// statement.
func isStatementLoss(err error) bool {
	code := sqlState(err)
	return code == sqlDuplicateStatement || code == sqlNoStatement
}

func ignoreStatementLoss(err error) error {
	if isStatementLoss(err) {
		return nil
	}
	return fmt.Errorf("probe prepared statements: %w", interpretError(err))
}
