package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// runIO executes the command line with the env's config and stdin; it
// returns stdout, stderr and the error.
func (o *opsEnv) runIO(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	root := newRoot(ctx, &out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--config", o.config}, args...))
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestMailList(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	for _, k := range []string{"1", "2", "3"} {
		o.seed(t, "order-confirmed:"+k, k, mailtype.StatusUnknown)
	}
	o.sc.Exec(t, `UPDATE mail SET updated_at = now() - interval '2 hours' WHERE order_id IN ('1', '2')`)
	o.sc.Exec(t, `UPDATE mail SET updated_at = now() - interval '3 hours' WHERE order_id = '2'`)
	o.seed(t, "order-confirmed:4", "4", mailtype.StatusFailed)
	o.seed(t, "order-confirmed:5", "5", mailtype.StatusSent)

	out, errOut, err := o.runIO(t, "", "mail", "list", "--status", "unknown", "--older-than", "1h")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, []string{"DEDUPE_KEY", "STATUS", "TEMPLATE", "SENDS", "LAST_CHANGE", "AGE", "LAST_ERROR"}, strings.Fields(lines[0]))
	require.True(t, strings.HasPrefix(lines[1], "order-confirmed:2 "), "oldest change first: %s", out)
	require.True(t, strings.HasPrefix(lines[2], "order-confirmed:1 "), out)
	require.Contains(t, lines[1], "(ambiguous) timeout (ambiguous): reset after DATA")
	require.Empty(t, errOut)

	out, errOut, err = o.runIO(t, "", "mail", "list", "--status", "unknown", "--limit", "2", "--json")
	require.NoError(t, err)
	var got []store.MailSummary
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, 2)
	require.Equal(t, "order-confirmed:2", got[0].DedupeKey)
	require.Equal(t, 1, got[0].Attempts)
	require.Contains(t, errOut, "showing the first 2; more match")

	out, _, err = o.runIO(t, "", "mail", "list", "--status", "failed", "--template", "order_cancelled", "--json")
	require.NoError(t, err)
	require.Equal(t, "[]\n", out, "an empty list is an empty array")
	out, _, err = o.runIO(t, "", "mail", "list", "--status", "failed")
	require.NoError(t, err)
	require.Contains(t, out, "order-confirmed:4")
	require.NotContains(t, out, "order-confirmed:5")

	for _, args := range [][]string{{"--status", "unknown", "--limit", "0"}, {"--status", "unknown", "--unconfirmed"}} {
		_, _, err = o.runIO(t, "", append([]string{"mail", "list"}, args...)...)
		require.Error(t, err, args)
	}
}

func TestMailReconcileFromFile(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	for _, k := range []string{"1", "2", "3"} {
		o.seed(t, "order-confirmed:"+k, k, mailtype.StatusUnknown)
	}
	o.seed(t, "order-confirmed:4", "4", mailtype.StatusSent)
	file := filepath.Join(t.TempDir(), "keys.txt")
	require.NoError(t, os.WriteFile(file, []byte("# unknown since the outage\norder-confirmed:1\norder-confirmed:2\n\norder-confirmed:1\n"), 0o600))

	// A dry run says what would happen and changes nothing.
	out, errOut, err := o.runIO(t, "", "mail", "reconcile", "--from", file, "--delivered", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:1 would become sent; EmailSent would be written to the outbox (dry run: nothing changed)\n"+
		"order-confirmed:2 would become sent; EmailSent would be written to the outbox (dry run: nothing changed)\n"+
		"order-confirmed:1 skipped: listed before, done once\n", out)
	require.Contains(t, errOut, "would reconcile 2 of 3 keys")
	require.EqualValues(t, 3, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'unknown'`))
	require.EqualValues(t, 0, o.sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	out, errOut, err = o.runIO(t, "", "mail", "reconcile", "--from", file, "--delivered")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:1 is now sent; EmailSent written to the outbox\n"+
		"order-confirmed:2 is now sent; EmailSent written to the outbox\n"+
		"order-confirmed:1 skipped: listed before, done once\n", out)
	require.Contains(t, errOut, "reconciled 2 of 3 keys (0 not found, 0 refused, 0 failed, 0 not attempted, 1 duplicates)")
	require.EqualValues(t, 2, o.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'`))

	// From stdin: one key goes back to pending, the others were not
	// unknown or do not exist; the run goes on past them and fails.
	out, errOut, err = o.runIO(t, "order-confirmed:3\norder-confirmed:4\nnope\norder-confirmed:1\n",
		"mail", "reconcile", "--from", "-", "--not-delivered")
	require.Equal(t, ExitRefused, ExitCode(err), "a mail was not unknown")
	require.ErrorContains(t, err, "3 of 4 keys were not reconciled")
	require.Equal(t, "order-confirmed:3 is now pending; a sender will attempt it again now\n"+
		"order-confirmed:4 not reconciled: cannot reconcile mail order-confirmed:4: it is sent; only unknown mails are reconciled (an ambiguous send under the unknown policy)\n"+
		"nope not reconciled: no mail has this dedupe key\n"+
		"order-confirmed:1 not reconciled: cannot reconcile mail order-confirmed:1: it is sent; only unknown mails are reconciled (an ambiguous send under the unknown policy)\n", out)
	require.Contains(t, errOut, "reconciled 1 of 4 keys (1 not found, 2 refused")
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:3' AND status = 'pending'`))

	_, _, err = o.runIO(t, "nope\n", "mail", "reconcile", "--from", "-", "--delivered")
	require.Equal(t, ExitNotFound, ExitCode(err), "only a missing key")

	// The single-key form keeps its line and codes, and takes --dry-run.
	o.seed(t, "order-confirmed:9", "9", mailtype.StatusUnknown)
	out, _, err = o.runIO(t, "", "mail", "reconcile", "order-confirmed:9", "--not-delivered", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:9 would become pending (dry run: nothing changed)\n", out)
	for _, args := range [][]string{
		{"order-confirmed:9", "--from", file, "--delivered"}, {"--delivered"}, {"--from", file},
		{"--from", filepath.Join(t.TempDir(), "missing.txt"), "--delivered"},
	} {
		_, _, err = o.runIO(t, "", append([]string{"mail", "reconcile"}, args...)...)
		require.Error(t, err, args)
	}
	_, _, err = o.runIO(t, "# nothing\n\n", "mail", "reconcile", "--from", "-", "--delivered")
	require.ErrorContains(t, err, "no dedupe key in it")
}

func TestBulkReconcileStopsAtAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	cfg := writeOpsConfig(t, "postgres://postgres@127.0.0.1:1/test?sslmode=disable", brokertest.URL(), brokertest.New(t), "")
	file := filepath.Join(t.TempDir(), "keys.txt")
	require.NoError(t, os.WriteFile(file, []byte("a\nb\n"), 0o600))
	_, err := runCLI(t, cfg, "mail", "reconcile", "--from", file, "--delivered")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	_, err = runCLI(t, cfg, "mail", "list", "--status", "unknown")
	require.Equal(t, ExitUnavailable, ExitCode(err))
}
