package cli

import (
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
