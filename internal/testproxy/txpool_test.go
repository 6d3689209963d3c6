package testproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// TestTxPoolSwitchesServersBetweenTransactions proves the pooler really
// drops session state: one client's statements run on alternating server
// connections, while a transaction stays on one.
func TestTxPoolSwitchesServersBetweenTransactions(t *testing.T) {
	t.Parallel()
	base := storetest.URL()
	p := testproxy.NewTxPool(t, testproxy.HostPort(t, base, "5432"), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(p.RewriteURL(t, base) + "&default_query_exec_mode=exec")
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	pid := func(q pgx.Tx) int32 {
		var n int32
		var err error
		if q != nil {
			err = q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&n)
		} else {
			err = conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&n)
		}
		require.NoError(t, err)
		return n
	}
	first, second, third := pid(nil), pid(nil), pid(nil)
	require.NotEqual(t, first, second, "the next transaction runs on the other server")
	require.Equal(t, first, third)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	in := pid(tx)
	require.Equal(t, in, pid(tx), "a transaction keeps its server")
	require.NoError(t, tx.Commit(ctx))

	// A session advisory lock stays on a server the client no longer has.
	var locked bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(726169636565)").Scan(&locked))
	require.True(t, locked)
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(726169636565)").Scan(&locked))
	require.False(t, locked, "the next statement is another session: it cannot take the lock this client took")
}
