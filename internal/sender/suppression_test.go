package sender_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// A mail to a suppressed address ends failed (reason suppressed, no
// attempt spent) without reaching the SMTP server, while the other
// mails of the same claim are delivered; once the address is removed
// from the list, a new mail to it is delivered.
func TestSuppressedRecipientNeverReachesTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	ctx := context.Background()
	_, _, err := b.sc.Store.Suppress(ctx, "Gone@example.com", "permanent bounce", store.SourceBounce)
	require.NoError(t, err)
	ids := map[string]int64{}
	for order, to := range map[string]string{
		"1": " Gone@EXAMPLE.com ", // the suppressed address, as the order service wrote it
		"2": "kept@example.com",
		"3": "gone@example.com", // another mailbox: the local part's case counts
	} {
		id, err := storetest.InsertPending(ctx, b.sc.Store, storetest.Mail{OrderID: order, ToEmail: to})
		require.NoError(t, err)
		ids[order] = id
	}
	cfg := testConfig()
	cfg.BatchSize = 10 // the pool's room (2 workers + 2) takes all three in its first claim
	_, m := b.start(t, cfg, sender.Deps{})

	b.waitRow(t, ids["1"], mailtype.StatusFailed, 1)
	b.waitRow(t, ids["2"], mailtype.StatusSent, 1)
	b.waitRow(t, ids["3"], mailtype.StatusSent, 1)
	require.Equal(t, 2, b.srv.Count(), "delivered: the two others")
	require.Equal(t, 2, b.srv.MailCommands(), "the suppressed mail never opened a transaction")
	var rcpts []string
	for _, msg := range b.srv.Messages() {
		rcpts = append(rcpts, msg.To...)
	}
	require.ElementsMatch(t, []string{"kept@example.com", "gone@example.com"}, rcpts)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND sends = 0 AND provider IS NULL
		AND last_error LIKE 'suppressed: %' AND last_error_class = 'permanent' AND locked_until IS NULL`, ids["1"]))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, 2, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed' AND dedupe_key = $1
		AND payload#>>'{data,error_reason}' = 'suppressed' AND payload#>>'{data,attempts}' = '0' AND payload#>>'{data,provider}' = ''`, key("1")))
	for typ, payload := range b.sc.QueryMap(t, `SELECT event_type, payload::text FROM outbox`) {
		require.Empty(t, api.ValidateFeedback(typ, []byte(payload)), "%s %s", typ, payload)
	}
	requireAttempts(t, m, "smtp", sender.OutcomeSent, 2)
	require.Zero(t, attempts(m, "smtp", sender.OutcomePermanent), "a suppressed mail is no attempt")

	_, err = b.sc.Store.Unsuppress(ctx, "gone@EXAMPLE.com ")
	require.ErrorIs(t, err, store.ErrNotFound, "compared normalised: the local part differs")
	_, err = b.sc.Store.Unsuppress(ctx, "Gone@EXAMPLE.com ")
	require.NoError(t, err)
	id, err := storetest.InsertPending(ctx, b.sc.Store, storetest.Mail{OrderID: "4", ToEmail: "Gone@example.com"})
	require.NoError(t, err)
	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Equal(t, 3, b.srv.Count())
}

// A permanent refusal of the recipient with a code of
// suppression.smtp_codes, at RCPT or after DATA, suppresses the address
// (source smtp/reject) in the outcome's transaction, also when an earlier
// ambiguous send leaves the mail unknown; a policy refusal (5.7.1), a
// refusal without an enhanced code and a 4.x.x reply do not.
func TestPermanentRecipientRefusalSuppresses(t *testing.T) {
	t.Parallel()
	codes := []string{"5.1.1", "5.1.10", "5.2.1"}
	for _, c := range []struct {
		name       string
		phase      smtptest.Phase
		faults     []smtptest.Fault
		status     mailtype.Status
		suppressed bool
	}{
		{"550 5.1.1 at RCPT", smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(550, "5.1.1 User unknown")}, mailtype.StatusFailed, true},
		{"556 5.1.10 at RCPT", smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(556, "5.1.10 Null MX")}, mailtype.StatusFailed, true},
		{"552 5.2.1 after DATA", smtptest.Data, []smtptest.Fault{smtptest.ReplyText(552, "5.2.1 Mailbox disabled")}, mailtype.StatusFailed, true},
		{"550 5.7.1 policy", smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(550, "5.7.1 Relaying denied")}, mailtype.StatusFailed, false},
		{"550 without a code", smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(550, "User unknown")}, mailtype.StatusFailed, false},
		{"450 4.2.1 then 450 4.2.1", smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(450, "4.2.1 Mailbox busy"),
			smtptest.ReplyText(450, "4.2.1 Mailbox busy")}, mailtype.StatusFailed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			b.srv.Inject(c.phase, c.faults...)
			id, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: "9", ToEmail: "Nobody@EXAMPLE.com"})
			require.NoError(t, err)
			cfg := testConfig()
			cfg.MaxAttempts, cfg.SuppressCodes = 2, codes
			b.start(t, cfg, sender.Deps{})
			b.waitRow(t, id, c.status, len(c.faults))
			want := map[string]string{}
			if c.suppressed {
				want["Nobody@example.com"] = "smtp/reject"
			}
			require.Equal(t, want, b.sc.QueryMap(t, `SELECT address, source FROM suppression`))
			require.EqualValues(t, 1, b.events(t, mailtype.EmailFailed))
		})
	}
}
