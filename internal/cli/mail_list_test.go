package cli

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// listCmdFlags parses args as `mail list` would and returns its flags and
// whether it searches (store.SearchMails) or lists one work status.
func listCmdFlags(t *testing.T, args ...string) (*listFlags, bool) {
	t.Helper()
	cmd := newMailListCmd(&env{ctx: context.Background()})
	require.NoError(t, cmd.ParseFlags(args))
	l := &listFlags{} // the command's own are not reachable: read its flags back
	l.status, _ = cmd.Flags().GetString("status")
	l.f.Unconfirmed, _ = cmd.Flags().GetBool("unconfirmed")
	l.f.OlderThan, _ = cmd.Flags().GetDuration("older-than")
	l.f.Template, _ = cmd.Flags().GetString("template")
	l.recipient, _ = cmd.Flags().GetString("recipient")
	l.since, _ = cmd.Flags().GetString("since")
	l.until, _ = cmd.Flags().GetString("until")
	l.prov, _ = cmd.Flags().GetString("provider")
	l.order, _ = cmd.Flags().GetString("order")
	l.f.Limit, _ = cmd.Flags().GetInt("limit")
	l.offset, _ = cmd.Flags().GetInt("offset")
	return l, l.searching(cmd)
}

func TestMailListChoosesItsList(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args   []string
		search bool
	}{
		{nil, true},
		{[]string{"--status", "unknown"}, false},
		{[]string{"--status", "failed", "--older-than", "1h", "--template", "order_confirmed"}, false},
		{[]string{"--unconfirmed"}, false},
		{[]string{"--status", "sent"}, true},
		{[]string{"--status", "unknown,failed"}, true},
		{[]string{"--status", "unknown", "--recipient", "ann@example.com"}, true},
		{[]string{"--status", "pending", "--offset", "0"}, true},
		{[]string{"--since", "1h"}, true},
	} {
		_, search := listCmdFlags(t, c.args...)
		require.Equal(t, c.search, search, c.args)
	}
}

func TestMailListSearchFlags(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	l, _ := listCmdFlags(t, "--status", "sent, cancelled", "--recipient", "Ann <Ann@EXAMPLE.com>\u00A0", "--since", "24h",
		"--until", "2026-12-06T11:00:00Z", "--order", "oldest", "--template", "order_confirmed", "--provider", "smtp",
		"--limit", "50", "--offset", "100")
	q, err := l.query(now)
	require.NoError(t, err)
	require.Equal(t, store.MailQuery{Recipient: "Ann@example.com", Template: "order_confirmed", Provider: "smtp",
		Statuses: []mailtype.Status{mailtype.StatusSent, mailtype.StatusCancelled},
		Since:    now.Add(-24 * time.Hour), Until: time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC),
		Oldest: true, Limit: 50, Offset: 100}, q)

	l, _ = listCmdFlags(t, "--since", "2026-12-01")
	q, err = l.query(now)
	require.NoError(t, err)
	require.Equal(t, store.MailQuery{Since: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Limit: 100}, q, "the defaults: every status, newest first")

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--status", "sent,bogus"}, ExitInvalid, `--status: "bogus" is not a status (pending, sending, sent, failed, cancelled, unknown, held)`},
		{[]string{"--status", "sent,"}, ExitInvalid, `--status: "" is not a status`},
		{[]string{"--since", "yesterday"}, ExitInvalid, `--since: "yesterday" is not a time (2026-12-06T10:00:00Z, 2026-12-06) nor a positive duration (24h)`},
		{[]string{"--until", "-3h"}, ExitInvalid, `--until: "-3h" is not a time`},
		{[]string{"--since", "1h", "--until", "2h"}, ExitInvalid, "--since must be before --until"},
		{[]string{"--order", "sideways"}, ExitInvalid, `--order must be newest or oldest, got "sideways"`},
		{[]string{"--status", "sent", "--limit", "201"}, ExitInvalid, "--limit must be 1..200 and --offset not negative in a search"},
		{[]string{"--status", "sent", "--offset", "-1"}, ExitInvalid, "--limit must be 1..200"},
		{[]string{"--status", "sent", "--older-than", "1h"}, ExitInvalid, "--unconfirmed and --older-than go with one work status alone"},
		{[]string{"--recipient", "ann"}, ExitInvalid, `--recipient: not an e-mail address: "ann"`},
		{[]string{"--recipient", "ann\xff@example.com"}, ExitInvalid, `--recipient: not an e-mail address: not valid UTF-8`},
	} {
		l, _ := listCmdFlags(t, c.args...)
		_, err := l.query(now)
		require.Equal(t, c.code, ExitCode(err), c.args)
		require.ErrorContains(t, err, c.want, c.args)
	}
}
