package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// An unknown role stops serve before it connects to anything, naming the
// key, whether it comes from --roles or from serve.roles.
func TestServeRefusesAnUnknownRole(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	_, _, err := o.runIO(t, "", "serve", "--roles", "consumer,mailer")
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, `serve.roles: unknown role "mailer" (known: consumer, sender, relay)`)
	require.ErrorContains(t, err, "--roles")

	bad := newOpsEnv(t, "serve:\n  roles: [intake]\n")
	_, _, err = bad.runIO(t, "", "serve")
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, `serve.roles: unknown role "intake"`)
}

// A tracing variable the SDK refuses stops serve at once with exit code 2
// and a message naming it, before any server is reached (the database
// here does not exist). Not parallel: it sets environment variables.
func TestServeRefusesABadTracingVariableWithExitCode2(t *testing.T) {
	t.Setenv("MAILSVC_TRACING_ENABLED", "true")
	t.Setenv("OTEL_TRACES_EXPORTER", "jaeger-thrift")
	t.Setenv("MAILSVC_MAIL_FROM", "Shop <orders@shop.example>")
	t.Setenv("MAILSVC_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	var out, errb bytes.Buffer
	err := Execute(context.Background(), []string{"serve"}, &out, &errb)
	require.Error(t, err)
	require.Equal(t, 2, ExitCode(err))
	require.Contains(t, err.Error(), `OTEL_TRACES_EXPORTER="jaeger-thrift"`)
	require.NotContains(t, err.Error(), "connect", "refused before the database")
}
