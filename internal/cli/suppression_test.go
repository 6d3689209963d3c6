package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
)

func TestSuppressionCommands(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	out, err := o.run(t, "suppression", "list")
	require.NoError(t, err)
	require.Equal(t, "no address is suppressed\n", out)
	out, err = o.run(t, "suppression", "list", "--json")
	require.NoError(t, err)
	require.Equal(t, "[]\n", out)

	out, err = o.run(t, "suppression", "add", " Ann@EXAMPLE.com ", "--reason", "asked by phone")
	require.NoError(t, err)
	require.Equal(t, "suppressed Ann@example.com: no mail is sent to it from the next claim on; undo with `mailsvc suppression remove Ann@example.com`\n", out)
	out, err = o.run(t, "suppression", "add", "Ann@example.COM", "--reason", "again")
	require.NoError(t, err)
	require.Contains(t, out, "Ann@example.com was suppressed already: since ")
	require.Contains(t, out, `source operator, reason "asked by phone" (kept)`)
	_, err = o.run(t, "suppression", "add", "bob@example.com")
	require.ErrorContains(t, err, `required flag(s) "reason" not set`)
	_, err = o.run(t, "suppression", "add", "not-an-address", "--reason", "x")
	require.ErrorContains(t, err, `not an e-mail address: "not-an-address"`)
	require.Equal(t, ExitInvalid, ExitCode(err), "input that cannot mean anything")

	out, err = o.run(t, "suppression", "list", "--json")
	require.NoError(t, err)
	var list []store.Suppression
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
	require.Equal(t, store.Suppression{Address: "Ann@example.com", Reason: "asked by phone", Source: store.SourceOperator,
		CreatedAt: list[0].CreatedAt, LastSeen: list[0].LastSeen, Seen: 2}, list[0])
	out, err = o.run(t, "suppression", "list")
	require.NoError(t, err)
	require.Regexp(t, `^ADDRESS\s+SOURCE\s+SINCE\s+SEEN\s+EXPIRES\s+REASON\nAnn@example.com\s+operator\s+\S+\s+2\s+never\s+asked by phone\n$`, out)

	out, err = o.run(t, "suppression", "remove", "ann@example.com")
	require.ErrorContains(t, err, `"ann@example.com" is not on the suppression list`, "the local part keeps its case")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.Empty(t, out)
	out, err = o.run(t, "suppression", "remove", "Ann@example.com")
	require.NoError(t, err)
	require.Contains(t, out, `removed Ann@example.com (source operator, since `)
	require.EqualValues(t, 0, o.sc.QueryInt(t, `SELECT count(*) FROM suppression`))

	// The history outlives the entry; the address is shown as compared.
	out, err = o.run(t, "suppression", "show", "Ann@EXAMPLE.com")
	require.NoError(t, err)
	require.Regexp(t, `^Ann@example\.com is not suppressed now\nhistory:\n`+
		`  \S+\s+suppressed\s+operator\s+asked by phone\n`+
		`  \S+\s+seen_again\s+operator\s+again\n`+
		`  \S+\s+removed\s+operator\s+removed by an operator\n$`, out)
	_, err = o.run(t, "suppression", "show", "never@example.com")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.ErrorContains(t, err, "never@example.com has never been suppressed nor bounced")
}
