package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestSearchFiltersRefuseBadText: a filter that is not valid UTF-8 or
// holds a NUL byte is the input's fault (exit 2, naming the field), never
// "database unavailable" (5); an unknown --action is refused naming the
// valid ones.
func TestSearchFiltersRefuseBadText(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mail", "list", "--template", "\xff"}, `search mails: invalid search: template: not valid UTF-8: "\xff"`},
		{[]string{"mail", "list", "--provider", "smtp\x00"}, `search mails: invalid search: provider: contains a NUL byte: "smtp\x00"`},
		{[]string{"audit", "list", "--actor", "\xff"}, `list audit: invalid search: actor: not valid UTF-8: "\xff"`},
		{[]string{"audit", "list", "--target", "a\x00"}, `list audit: invalid search: target: contains a NUL byte: "a\x00"`},
		{[]string{"audit", "list", "--action", "bogus"}, `--action: no action "bogus": one of resend, reconcile, ` +
			`provider-resume, suppression-add, suppression-remove, dlq-replay, dlq-skip, outbox-republish`},
		{[]string{"audit", "list", "--limit", "0"}, "list audit: invalid search: limit must be 1..1000, got 0"},
	} {
		_, err := o.run(t, c.args...)
		require.Equal(t, ExitInvalid, ExitCode(err), "%q", c.args)
		require.EqualError(t, err, c.want)
	}
}

// TestAuditListShowsAStartedRowAsUnknown: a row whose process stopped
// before recording the result says so.
func TestAuditListShowsAStartedRowAsUnknown(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)
	o.sc.Exec(t, `INSERT INTO audit_log (actor, via, action, target, dedupe_key, reason, result)
		VALUES ('ann', 'cli', 'resend', 'order-confirmed:1', 'order-confirmed:1', 'asked', 'started')`)
	out, err := o.run(t, "audit", "list")
	require.NoError(t, err)
	require.Regexp(t, `\n\S+\s+ann\s+cli\s+resend\s+order-confirmed:1\s+outcome unknown: the process stopped before recording the result; check the mail\s+asked\s*\n$`, out)
	out, err = o.run(t, "audit", "list", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"result": "started"`)
}

// TestStatusCommandsNeedOnlyTheirConnection: `migrate status` runs with
// database.url alone, `dlq list` and `dlq show` with the broker's keys
// alone.
func TestStatusCommandsNeedOnlyTheirConnection(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dbOnly := filepath.Join(t.TempDir(), "support.yaml")
	require.NoError(t, os.WriteFile(dbOnly, fmt.Appendf(nil, "database:\n  url: %q\n", o.sc.URL), 0o600))
	out, err := runCLI(t, dbOnly, "migrate", "status")
	require.NoError(t, err)
	require.Contains(t, out, "00270 applied  00270_audit_started.sql\n")
	_, err = runCLI(t, dbOnly, "migrate", "up")
	require.Equal(t, ExitInvalid, ExitCode(err), "applying migrations still needs the whole configuration")

	brokerOnly := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(brokerOnly, fmt.Appendf(nil, "amqp:\n  url: %q\n  dead_letter_queue: %q\n",
		brokertest.URL(), o.names.DeadLetterQueue), 0o600))
	_, err = runCLI(t, brokerOnly, "dlq", "list")
	require.Equal(t, ExitNotFound, ExitCode(err), "past the configuration: the queue is not declared")
	_, err = runCLI(t, brokerOnly, "dlq", "show", "dl-1")
	require.Equal(t, ExitNotFound, ExitCode(err))

	badURL := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(badURL, []byte("amqp:\n  url: \"http://rabbit\"\n  dead_letter_queue: \"\"\n"), 0o600))
	_, err = runCLI(t, badURL, "dlq", "list")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.EqualError(t, err, "invalid config:\namqp.url: must be an amqp:// or amqps:// URL\namqp.dead_letter_queue: must not be empty")
}
