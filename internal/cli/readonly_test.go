package cli

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestReadOnlyCommandsNeedOnlyTheDatabaseURL: with a config that holds
// database.url alone, every command that only reads runs; an action still
// needs the whole configuration (mail.from).
func TestReadOnlyCommandsNeedOnlyTheDatabaseURL(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:42", "42", mailtype.StatusFailed)
	dbOnly := filepath.Join(t.TempDir(), "support.yaml")
	require.NoError(t, os.WriteFile(dbOnly, fmt.Appendf(nil, "database:\n  url: %q\n", o.sc.URL), 0o600))

	for _, args := range [][]string{
		{"mail", "show", "order-confirmed:42"}, {"mail", "show", "--order", "42", "--json"},
		{"mail", "list", "--status", "failed"}, {"provider", "status"}, {"suppression", "list"},
		{"audit", "list"}, {"outbox", "list"},
	} {
		_, err := runCLI(t, dbOnly, args...)
		require.NoError(t, err, args)
	}
	out, err := runCLI(t, dbOnly, "audit", "list")
	require.NoError(t, err)
	require.Equal(t, "no operator action recorded\n", out)

	_, err = runCLI(t, dbOnly, "mail", "resend", "order-confirmed:42")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.ErrorContains(t, err, "mail.from: is required")

	noURL := filepath.Join(t.TempDir(), "empty.yaml")
	require.NoError(t, os.WriteFile(noURL, []byte("database:\n  url: \"\"\n"), 0o600))
	_, err = runCLI(t, noURL, "mail", "show", "order-confirmed:42")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.EqualError(t, err, "invalid config:\ndatabase.url: is required")
}

// TestActionsAreAudited: the CLI's actions write their audit rows, under
// --actor or the operating system's user, and `audit list` shows them.
func TestActionsAreAudited(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)
	me := actorName("")
	if u, err := user.Current(); err == nil {
		require.Equal(t, u.Username, me)
	}

	out, err := o.run(t, "mail", "resend", "order-confirmed:1", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "would create order-confirmed:1:resend:1 (pending) as a copy of order-confirmed:1 (dry run: nothing changed)\n", out)
	_, err = o.run(t, "mail", "resend", "order-confirmed:1", "--reason", "customer asked")
	require.NoError(t, err)
	_, err = o.run(t, "mail", "resend", "order-confirmed:1", "--actor", "ann")
	require.Equal(t, ExitRefused, ExitCode(err))
	_, err = o.run(t, "provider", "resume", "resend", "--actor", "ann", "--reason", "quota raised")
	require.NoError(t, err)
	_, err = o.run(t, "provider", "resume", "pigeon", "--actor", "ann")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.EqualError(t, err, `no provider "pigeon": smtp or resend`)

	require.Equal(t, []string{
		me + " cli resend order-confirmed:1 done customer asked",
		"ann cli resend order-confirmed:1 refused ",
		"ann cli provider-resume resend done quota raised",
		"ann cli provider-resume pigeon refused ",
	}, o.audits(t))

	out, err = o.run(t, "audit", "list", "--mail", " order-confirmed:1 ", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"detail": "cannot resend mail order-confirmed:1:resend:1: it is pending;`)
	out, err = o.run(t, "audit", "list", "--action", "resend", "--since", "1h", "--limit", "1")
	require.NoError(t, err)
	require.Regexp(t, `^AT\s+ACTOR.*\n\S+\s+ann\s+cli\s+resend\s+order-confirmed:1\s+refused\s+\(no reason given\)\s+cannot resend mail`, out)
	for _, args := range [][]string{{"--since", "soon"}} {
		_, err = o.run(t, append([]string{"audit", "list"}, args...)...)
		require.Equal(t, ExitInvalid, ExitCode(err), args)
	}
	_, err = o.run(t, "audit", "list", "--mail", "\x01")
	require.Equal(t, ExitInvalid, ExitCode(err))
}
