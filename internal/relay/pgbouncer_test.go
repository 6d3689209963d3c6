//go:build pgbouncer

package relay_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTwoRelaysThroughPgBouncerInTransactionMode is a manual check, built
// only with -tags pgbouncer (make test stays self-contained): it starts
// Debian's pgbouncer (1.18 here) in pool_mode=transaction on a free port
// with its own configuration in a temporary directory, runs two relays
// through it (pgx in exec mode, or MAILSVC_PGBOUNCER_EXEC_MODE), and checks
// that exactly one leads and every row reaches the events queue once,
// before and after the leader stops. Run it as root (pgbouncer runs as
// nobody):
//
//	apt-get install pgbouncer   # with a policy-rc.d that keeps the daemon from starting
//	go test -tags pgbouncer -run PgBouncer -v ./internal/relay/
func TestTwoRelaysThroughPgBouncerInTransactionMode(t *testing.T) {
	mode := os.Getenv("MAILSVC_PGBOUNCER_EXEC_MODE")
	if mode == "" {
		mode = "exec"
	}
	b := setup(t, setupOpts{})
	dir, err := os.MkdirTemp("/tmp", "pgb-manual-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// The test schema is set per server connection: PgBouncer does not
	// pass search_path on from the client.
	cfg := fmt.Sprintf(`[databases]
mailsvc = host=127.0.0.1 port=5432 dbname=test user=postgres connect_query='SET search_path = %s'
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 100
logfile = %s/pgb.log
pidfile = %s/pgb.pid
ignore_startup_parameters = extra_float_digits
`, b.sc.Name, port, dir, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgb.ini"), []byte(cfg), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	cmd := exec.Command("pgbouncer", "-u", "nobody", filepath.Join(dir, "pgb.ini"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log, _ := os.ReadFile(filepath.Join(dir, "pgb.log"))
		t.Logf("pgbouncer log:\n%s", log)
		_ = os.RemoveAll(dir)
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/mailsvc?sslmode=disable&default_query_exec_mode=%s", port, mode)
	b.relayStore = openStore(t, url, b.names.EventsExchange)
	obs := observe(t, b.names, "#")
	first := b.newRelay(t, nil)
	b.start(t, first)
	require.Eventually(t, func() bool { return value(t, b.m.Leader) == 1 }, 10*time.Second, 10*time.Millisecond)
	_, m2 := b.second(t, false)
	l := sampleLeaders(t, b.m, m2)
	for i := 0; i < 10; i++ {
		b.insert(t, feedbackBatch(string(rune('a'+i)), 10)...)
	}
	require.Eventually(t, func() bool { return b.countPublished(t) == 100 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, value(t, m2.Leader))
	began := time.Now()
	stopNow(t, first)
	b.insert(t, feedbackBatch("late", 20)...)
	require.Eventually(t, func() bool { return b.countPublished(t) == 120 }, 30*time.Second, 10*time.Millisecond)
	t.Logf("takeover + drain through pgbouncer: %s", time.Since(began))
	requireEachOnce(t, b, obs, 120)
	require.Equal(t, 100.0, sentCount(t, b.m))
	require.Eventually(t, func() bool { return sentCount(t, m2) == 20 }, 10*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, l.maxSum(), 1.0, "never two leaders at once")
}
