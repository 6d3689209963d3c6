package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
)

// resendWebhooksYAML completes the mail section of an ops config with
// mail.delivery_confirm_after and takes Resend's webhooks, so Resend's
// mails are checked for a delivery report.
const resendWebhooksYAML = `  delivery_confirm_after: 2h
webhooks:
  resend_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
`

// unconfirmedMails writes three mails sent through Resend 3 h ago (one
// delivered since), one sent 1 h ago, and one sent 3 h ago through SMTP,
// which reports nothing under this config.
func unconfirmedMails(t *testing.T, o *opsEnv) {
	t.Helper()
	o.sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, to_email, status, attempts, sends,
		provider, provider_message_id, sent_at, updated_at, delivered_at)
		SELECT gen_random_uuid(), k, k, 'order_confirmed', 'b@example.com', 'sent', 1, 1, p, 'em_' || k,
		    now() - ago::interval, now() - ago::interval, CASE WHEN k = 'd' THEN now() END
		FROM (VALUES ('a', 'resend', '3 hours'), ('b', 'resend', '200 minutes'), ('d', 'resend', '3 hours'),
		             ('n', 'resend', '1 hour'), ('s', 'smtp', '3 hours')) v(k, p, ago)`)
}

func TestMailListUnconfirmed(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, resendWebhooksYAML)
	unconfirmedMails(t, o)

	out, errOut, err := o.runIO(t, "", "mail", "list", "--unconfirmed")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.True(t, strings.HasPrefix(lines[1], "b "), "oldest send first: %s", out)
	require.True(t, strings.HasPrefix(lines[2], "a "), out)
	require.Empty(t, errOut)

	out, _, err = o.runIO(t, "", "mail", "list", "--unconfirmed", "--json", "--limit", "1")
	require.NoError(t, err)
	var got []store.MailSummary
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, 1)
	require.Equal(t, store.MailSummary{DedupeKey: "b", OrderID: "b", Template: "order_confirmed", Status: "sent", Sends: 1,
		Attempts: 1, Provider: "resend", ProviderMessageID: "em_b", CreatedAt: got[0].CreatedAt, UpdatedAt: got[0].UpdatedAt}, got[0])

	for _, args := range [][]string{{"--unconfirmed", "--status", "failed"}, {"--unconfirmed", "--limit", "0"}} {
		_, _, err = o.runIO(t, "", append([]string{"mail", "list"}, args...)...)
		require.Error(t, err, args)
	}
}

// Without a provider that reports deliveries, the filter is refused with
// the keys that turn it on.
func TestMailListUnconfirmedOff(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	unconfirmedMails(t, o)
	_, _, err := o.runIO(t, "", "mail", "list", "--unconfirmed")
	require.Equal(t, 1, ExitCode(err))
	require.ErrorContains(t, err, "no mail is checked for a delivery report")
	require.ErrorContains(t, err, "webhooks.resend_secret")
	out, err := o.run(t, "mail", "show", "a")
	require.NoError(t, err)
	require.NotContains(t, out, "delivery unconfirmed")
}

func TestMailShowUnconfirmed(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, resendWebhooksYAML)
	unconfirmedMails(t, o)

	out, err := o.run(t, "mail", "show", "a")
	require.NoError(t, err)
	require.Contains(t, out, "delivery unconfirmed:  sent 3h ago via resend (id em_a), no delivery or bounce report after "+
		"mail.delivery_confirm_after=2h; look the id up in the provider's dashboard or logs before any resend\n")
	require.Contains(t, out, "status:                sent\n", "the flag changes no status")
	for _, key := range []string{"d", "n", "s"} {
		out, err = o.run(t, "mail", "show", key)
		require.NoError(t, err)
		require.NotContains(t, out, "delivery unconfirmed", key)
	}

	out, err = o.run(t, "mail", "show", "a", "--json")
	require.NoError(t, err)
	var m store.MailView
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	require.True(t, m.DeliveryUnconfirmed)
}
