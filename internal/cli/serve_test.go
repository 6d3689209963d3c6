package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

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
