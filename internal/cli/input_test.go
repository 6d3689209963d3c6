package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// audits returns the audit log as "actor via action target result
// reason" lines, oldest first.
func (o *opsEnv) audits(t *testing.T) []string {
	t.Helper()
	return o.sc.QueryStrings(t, `SELECT concat_ws(' ', actor, via, action, target, result, reason) FROM audit_log ORDER BY id`)
}

// TestReconcileFromAFileWithBadLines: a line that is not UTF-8 is
// reported as input that is not a key, with its line number, and the keys
// after it are still reconciled; a byte-order mark does not hide the
// first key; the exit code is the input's (2), not the database's (5).
func TestReconcileFromAFileWithBadLines(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	for _, k := range []string{"1", "2", "3"} {
		o.seed(t, "order-confirmed:"+k, k, mailtype.StatusUnknown)
	}
	file := filepath.Join(t.TempDir(), "keys.txt")
	require.NoError(t, os.WriteFile(file, []byte("\xEF\xBB\xBForder-confirmed:1\r\nbad\xffkey\r\norder-confirmed:2\u00A0\r\n\r\norder-confirmed:3\r\n"), 0o600))

	out, errOut, err := o.runIO(t, "", "mail", "reconcile", "--from", file, "--delivered", "--actor", "ann", "--reason", "provider log")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.EqualError(t, err, "1 of 4 keys were not reconciled (see the lines above; database "+redactedURL(o)+")")
	require.Equal(t, "order-confirmed:1 is now sent; EmailSent written to the outbox\n"+
		`line 2: not reconciled: not a dedupe key: not valid UTF-8: "bad\xffkey"; byte 0xff at offset 3 is not part of a character: check the file's encoding (the input's fault: nothing was looked up)`+"\n"+
		"order-confirmed:2 is now sent; EmailSent written to the outbox\n"+
		"order-confirmed:3 is now sent; EmailSent written to the outbox\n", out)
	require.Equal(t, "reconciled 3 of 4 keys (0 not found, 0 refused, 0 failed, 0 not attempted, 0 duplicates, 1 lines not keys)\n", errOut)
	require.EqualValues(t, 3, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`))
	require.Equal(t, []string{
		"ann cli reconcile order-confirmed:1 done provider log",
		"ann cli reconcile bad\uFFFDkey refused provider log",
		"ann cli reconcile order-confirmed:2 done provider log",
		"ann cli reconcile order-confirmed:3 done provider log",
	}, o.audits(t))

	// A dry run decides alike and records nothing.
	out, _, err = o.runIO(t, "bad\xffkey\norder-confirmed:1\n", "mail", "reconcile", "--from", "-", "--delivered", "--dry-run")
	require.Equal(t, ExitRefused, ExitCode(err), "a refusal outranks a line that is not a key")
	require.Contains(t, out, "line 1: not reconciled: not a dedupe key: not valid UTF-8")
	require.Len(t, o.audits(t), 4)
}

// redactedURL is the database URL of o as the CLI prints it.
func redactedURL(o *opsEnv) string {
	return mailtype.NewRedactor(mailtype.ConnSecrets(o.sc.URL)...).Redact(o.sc.URL)
}

// TestMailShowOfAKeyThatIsNotOne: exit 2 with what is wrong, never 5.
func TestMailShowOfAKeyThatIsNotOne(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:42", "42", mailtype.StatusSent)
	for _, args := range [][]string{{"mail", "show", "order-confirmed:\xff42"}, {"mail", "resend", "order-confirmed:\xff42"},
		{"mail", "reconcile", "order-confirmed:\xff42", "--delivered"}} {
		out, err := o.run(t, args...)
		require.Equal(t, ExitInvalid, ExitCode(err), args)
		require.ErrorContains(t, err, `not a dedupe key: not valid UTF-8: "order-confirmed:\xff42"; byte 0xff at offset 16`, args)
		require.Empty(t, out)
	}
	_, err := o.run(t, "mail", "show", "--order", "4\x002")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.EqualError(t, err, `--order: not an order id: control character U+0000 at offset 1: "4\x002" (the input's fault: nothing was looked up)`)

	// Space around a key, a no-break space or a byte-order mark included,
	// is not part of it.
	out, err := o.run(t, "mail", "show", "\uFEFForder-confirmed:42\u00A0")
	require.NoError(t, err)
	require.Contains(t, out, "order-confirmed:42")
	require.Equal(t, []string{"", ""}, o.sc.QueryStrings(t, `SELECT reason FROM audit_log ORDER BY id`),
		"the resend and the reconcile were refused and recorded")
}

// TestSuppressionAddressesAreNormalised: angle brackets, a display name
// and a trailing no-break space are not stored; remove of the plain
// address finds the entry.
func TestSuppressionAddressesAreNormalised(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	out, err := o.run(t, "suppression", "add", "<ann@example.com>", "--reason", "bounces", "--actor", "ann")
	require.NoError(t, err)
	require.Equal(t, "suppressed ann@example.com: no mail is sent to it from the next claim on; undo with `mailsvc suppression remove ann@example.com`\n", out)
	out, err = o.run(t, "suppression", "add", "Bob <bob@EXAMPLE.com>\u00A0", "--reason", "asked", "--actor", "ann")
	require.NoError(t, err)
	require.Contains(t, out, "suppressed bob@example.com:")
	require.Equal(t, []string{"ann@example.com", "bob@example.com"}, o.sc.QueryStrings(t, `SELECT address FROM suppression ORDER BY address`))

	out, err = o.run(t, "suppression", "remove", "ann@example.com", "--actor", "bob", "--dry-run")
	require.NoError(t, err)
	require.Regexp(t, `^would remove ann@example.com \(source operator, since \S+, reason "bounces"\); mails to it would be sent again \(dry run: nothing changed\)\n$`, out)
	out, err = o.run(t, "suppression", "remove", "ann@example.com", "--actor", "bob")
	require.NoError(t, err)
	require.Regexp(t, `^removed ann@example.com \(source operator, since \S+, reason "bounces"\); mails to it are sent again\n$`, out)
	_, err = o.run(t, "suppression", "add", "ann@example.com, bob@example.com", "--reason", "x", "--actor", "ann")
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.ErrorContains(t, err, `not one e-mail address but 2: "ann@example.com, bob@example.com"`)
	require.Equal(t, []string{"bob@example.com"}, o.sc.QueryStrings(t, `SELECT address FROM suppression`))

	require.Equal(t, []string{
		"ann cli suppression-add ann@example.com done bounces",
		"ann cli suppression-add bob@example.com done asked",
		"bob cli suppression-remove ann@example.com done ", // no reason
		"ann cli suppression-add ann@example.com, bob@example.com refused x",
	}, o.audits(t))

	out, err = o.run(t, "audit", "list", "--actor", "bob")
	require.NoError(t, err)
	require.Regexp(t, `^AT\s+ACTOR\s+VIA\s+ACTION\s+TARGET\s+RESULT\s+REASON\s+DETAIL\n`+
		`\S+\s+bob\s+cli\s+suppression-remove\s+ann@example.com\s+done\s+\(no reason given\)\s+removed ann@example.com \(source operator, since \S+, reason "bounces"\); mails to it are sent again\n$`, out)
}
