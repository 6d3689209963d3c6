package cli

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

func TestGroupCommandsRefuseUnknownSubcommands(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"mail", "frobnicate"}, {"dlq"}, {"config", "nope"}, {"template"}} {
		var out, errb bytes.Buffer
		err := Execute(context.Background(), args, &out, &errb)
		require.Error(t, err, "%v", args)
		require.NotEqual(t, 0, ExitCode(err))
	}
}

// serve that cannot reach its database exits 5, like every command that
// cannot reach a server, with a message that says what to check.
func TestServeWithoutADatabaseExits5(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now: refused
	cfg := writeOpsConfig(t, "postgres://postgres@"+addr+"/none?connect_timeout=2", "amqp://guest:guest@127.0.0.1:1/",
		brokertest.New(t), "")
	_, err = runCLI(t, cfg, "serve")
	require.Error(t, err)
	require.Equal(t, ExitUnavailable, ExitCode(err), "%v", err)
	require.ErrorContains(t, err, "check database.url, or start PostgreSQL")
}
