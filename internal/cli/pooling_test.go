package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// serve with a plain database.url through a transaction pooler (TxPool,
// which shares server sessions per transaction as PgBouncer's pool_mode =
// transaction does) stops at start with exit code 2 and a message naming
// the key, PgBouncer's pooling mode and the fix, before it declares or
// consumes anything; migrate refuses it too, whatever the exec mode (its
// advisory lock is session state), and says where to run it.
func TestTransactionPoolingIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	names := brokertest.New(t)
	url := testproxy.NewTxPool(t, testproxy.HostPort(t, sc.URL, "5432"), 3).RewriteURL(t, sc.URL)

	_, err := runCLI(t, writeOpsConfig(t, url, brokertest.URL(), names, ""), "serve")
	require.Equal(t, ExitInvalid, ExitCode(err), "%v", err)
	for _, want := range []string{"database.url", "MAILSVC_DATABASE_URL", "PgBouncer", "pool_mode = transaction",
		"default_query_exec_mode=exec", "pool_mode = session", "42P05"} {
		require.ErrorContains(t, err, want)
	}
	_, _, qerr := brokertest.QueueState(t, names.Queue)
	require.Error(t, qerr, "the input queue was never declared: nothing was consumed")

	exec := storetest.WithParam(url, "default_query_exec_mode", "exec")
	for _, u := range []string{url, exec} {
		_, err = runCLI(t, writeOpsConfig(t, u, brokertest.URL(), names, ""), "migrate")
		require.Equal(t, ExitInvalid, ExitCode(err), "%v", err)
		require.ErrorContains(t, err, "database.url (MAILSVC_DATABASE_URL) leads to a transaction pooler")
		require.ErrorContains(t, err, "advisory lock")
	}
	out, err := runCLI(t, writeOpsConfig(t, exec, brokertest.URL(), names, ""), "migrate", "status")
	require.NoError(t, err)
	require.Contains(t, out, "applied")
}
