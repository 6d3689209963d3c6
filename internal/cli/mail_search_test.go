package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// TestMailListSearches: `mail list` lists every status, sent and cancelled
// included, newest first, and filters by recipient and time
// (store.SearchMails).
func TestMailListSearches(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	for i, st := range []mailtype.Status{mailtype.StatusSent, mailtype.StatusCancelled, mailtype.StatusFailed, mailtype.StatusSent} {
		k := string(rune('1' + i))
		o.seed(t, "order-confirmed:"+k, k, st)
		o.sc.Exec(t, `UPDATE mail SET created_at = now() - make_interval(hours => $2) WHERE dedupe_key = $1`, "order-confirmed:"+k, 4-i)
	}
	o.sc.Exec(t, `UPDATE mail SET to_email = 'ann@example.com' WHERE order_id IN ('2', '3')`)

	keys := func(out string) []string {
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ks = append(ks, strings.Fields(line)[0])
		}
		return ks
	}
	out, errOut, err := o.runIO(t, "", "mail", "list")
	require.NoError(t, err)
	require.Equal(t, []string{"order-confirmed:4", "order-confirmed:3", "order-confirmed:2", "order-confirmed:1"}, keys(out), "every status, newest first")
	require.Empty(t, errOut)

	out, _, err = o.runIO(t, "", "mail", "list", "--status", "sent,cancelled", "--order", "oldest")
	require.NoError(t, err)
	require.Equal(t, []string{"order-confirmed:1", "order-confirmed:2", "order-confirmed:4"}, keys(out))

	out, _, err = o.runIO(t, "", "mail", "list", "--recipient", "Ann <ann@EXAMPLE.com>\u00A0")
	require.NoError(t, err)
	require.Equal(t, []string{"order-confirmed:3", "order-confirmed:2"}, keys(out))

	out, _, err = o.runIO(t, "", "mail", "list", "--since", "150m", "--json")
	require.NoError(t, err)
	var got []store.MailSummary
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, 2)
	require.Equal(t, "order-confirmed:4", got[0].DedupeKey)
	require.Equal(t, mailtype.StatusSent, got[0].Status)

	out, errOut, err = o.runIO(t, "", "mail", "list", "--limit", "1", "--offset", "1")
	require.NoError(t, err)
	require.Equal(t, []string{"order-confirmed:3"}, keys(out))
	require.Equal(t, "showing 2 to 2 of 4 matching mails (page with --offset, or narrow the search)\n", errOut)
}
