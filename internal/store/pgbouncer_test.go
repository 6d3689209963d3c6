//go:build pgbouncer

package store_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// startPgBouncer starts Debian's pgbouncer in poolMode on a free port, in
// front of the test database with sc's schema as search_path (set per
// server connection: PgBouncer passes no search_path on from the client),
// and returns the URL of its database "mailsvc". It is stopped when the
// test ends.
func startPgBouncer(t *testing.T, sc *storetest.Schema, poolMode string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "pgb-store-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cfg := fmt.Sprintf(`[databases]
mailsvc = host=127.0.0.1 port=5432 dbname=test user=postgres connect_query='SET search_path = %s'
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = %s
default_pool_size = 3
max_client_conn = 100
logfile = %s/pgb.log
pidfile = %s/pgb.pid
`, sc.Name, port, dir, poolMode, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgb.ini"), []byte(cfg), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	cmd := exec.Command("pgbouncer", "-u", "nobody", filepath.Join(dir, "pgb.ini"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/mailsvc?sslmode=disable", port)
}

// TestThroughPgBouncer is a manual check, built only with -tags pgbouncer
// (as internal/relay's): a store opens through PgBouncer in session mode
// with the URL's default exec mode (prepared statements work there, and
// the sessions still get generic plans), and in transaction mode in every
// mode a transaction pooler allows; in each, the sender's pipelined write
// commits once. Run it as root (pgbouncer runs as nobody):
//
//	apt-get install pgbouncer   # with a policy-rc.d that keeps the daemon from starting
//	go test -tags pgbouncer -run PgBouncer -v ./internal/store/
//
// ProbePooling tells each pool mode apart.
func TestThroughPgBouncer(t *testing.T) {
	for _, c := range []struct{ pool, mode, plans string }{
		{"session", "", "force_generic_plan"}, {"session", "cache_statement", "force_generic_plan"},
		{"transaction", "exec", "auto"}, {"transaction", "simple_protocol", "auto"}, {"transaction", "describe_exec", "auto"},
	} {
		t.Run(c.pool+"/"+c.mode, func(t *testing.T) {
			sc := storetest.New(t)
			p := setupPipeline(t, sc)
			url := startPgBouncer(t, sc, c.pool)
			if c.mode != "" {
				url = storetest.WithParam(url, "default_query_exec_mode", c.mode)
			}
			ctx := testCtx(t)
			st, err := store.Open(ctx, store.Options{URL: url, MaxConns: 2})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			pooling, err := st.ProbePooling(ctx)
			require.NoError(t, err)
			require.Equal(t, store.Pooling{Shared: c.pool == "transaction", CachesStatements: c.mode == "" || c.mode == "cache_statement"}, pooling)
			plans, err := st.SettingForTest(ctx, "plan_cache_mode")
			require.NoError(t, err)
			require.Equal(t, c.plans, plans)
			res, started, err := st.FinishAndStart(ctx, p.as, p.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.NoError(t, res[0].Err)
			require.Len(t, started, 1)
			requireCommitted(t, sc)
		})
	}
}

// TestProbeFindsPgBouncerTransactionPooling: PgBouncer in pool_mode =
// transaction with pgx's default exec mode is found Shared and losing
// prepared statements (1.18 carries none), probe after probe.
func TestProbeFindsPgBouncerTransactionPooling(t *testing.T) {
	sc := storetest.New(t)
	url := startPgBouncer(t, sc, "transaction")
	ctx := testCtx(t)
	st, err := store.Open(ctx, store.Options{URL: url, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	for range 5 {
		p, err := st.ProbePooling(ctx)
		require.NoError(t, err)
		require.Equal(t, store.Pooling{Shared: true, CachesStatements: true, StatementsBreak: true}, p)
	}
}
