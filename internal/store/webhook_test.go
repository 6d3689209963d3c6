package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// sentByResend writes a mail to `to` for order and records it sent by
// Resend with email id emailID, through the claim and the outcome write.
func sentByResend(t *testing.T, st *store.Store, order, to, emailID string) {
	t.Helper()
	ctx := testCtx(t)
	_, err := storetest.InsertPending(ctx, st, storetest.Mail{OrderID: order, ToEmail: to})
	require.NoError(t, err)
	got, err := st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.False(t, got[0].Suppressed)
	res, err := st.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence,
		Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "resend", ProviderMessageID: emailID}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

func TestRecordWebhookInEveryExecMode(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 9, 18, 8, 0, 4, 126e6, time.UTC)
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			sentByResend(t, st, "1", "ann@example.com", "em_1")
			sentByResend(t, st, "2", "Bob@example.com", "em_2")
			record := func(w store.Webhook) store.WebhookResult {
				t.Helper()
				w.Provider = "resend"
				res, err := st.RecordWebhook(ctx, w)
				require.NoError(t, err)
				return res
			}
			delivered := store.Webhook{ID: "msg_d1", Type: "email.delivered", At: at, EmailID: "em_1", Effect: store.EffectDelivered}
			require.Equal(t, store.WebhookResult{Matched: 1, Events: []mailtype.EventType{mailtype.EmailDelivered}}, record(delivered))
			require.Equal(t, store.WebhookResult{Duplicate: true}, record(delivered), "a redelivery changes nothing")
			second := delivered
			second.ID, second.At = "msg_d2", at.Add(time.Minute)
			require.Equal(t, store.WebhookResult{Matched: 1}, record(second), "a second report of the delivery writes no event")

			bounce := store.Webhook{ID: "msg_b1", Type: "email.bounced", At: at, EmailID: "em_2", Effect: store.EffectBounced,
				Recipients: []string{"  Bob@EXAMPLE.com "}, Reason: "permanent bounce General: 550 5.1.1 <Bob@example.com> unknown",
				BounceType: "permanent", BounceSubtype: "General"}
			require.Equal(t, store.WebhookResult{Matched: 1, Suppressed: 1, Events: []mailtype.EventType{mailtype.EmailBounced}}, record(bounce))
			require.Equal(t, store.WebhookResult{Duplicate: true}, record(bounce))
			complaint := store.Webhook{ID: "msg_c1", Type: "email.complained", At: at, EmailID: "em_other", Effect: store.EffectComplained,
				Recipients: []string{"carol@example.com", "not an address"}, Reason: "spam"}
			require.Equal(t, store.WebhookResult{}, record(complaint), "a complaint about another sender's mail suppresses nothing")
			opened := store.Webhook{ID: "msg_o1", Type: "email.opened", At: at, EmailID: "em_1"}
			require.Equal(t, store.WebhookResult{}, record(opened))

			require.EqualValues(t, 5, sc.QueryInt(t, `SELECT count(*) FROM webhook_event WHERE provider = 'resend'`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '1' AND delivered_at = $1 AND status = 'sent'`, at))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '2' AND delivered_at IS NULL AND status = 'failed'`))
			require.Equal(t, map[string]string{"EmailSent": "2", "EmailDelivered": "1", "EmailBounced": "1"},
				sc.QueryMap(t, `SELECT event_type, count(*)::text FROM outbox GROUP BY event_type`))
			require.Equal(t, map[string]string{"EmailDelivered": "1 msg_d1 2026-09-18T08:00:04.126Z", "EmailBounced": "2 msg_b1 General"},
				sc.QueryMap(t, `SELECT event_type, concat_ws(' ', order_id, payload#>>'{data,provider_event,webhook_id}',
					COALESCE(payload#>>'{data,provider_event,bounce_subtype}', payload#>>'{data,provider_event,at}'))
					FROM outbox WHERE event_type <> 'EmailSent'`))
			for typ, payload := range sc.QueryMap(t, `SELECT event_type, payload::text FROM outbox WHERE event_type <> 'EmailSent'`) {
				require.Empty(t, api.ValidateFeedback(typ, []byte(payload)), "%s %s", typ, payload)
			}
			list, err := st.Suppressions(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			got := map[string]store.Suppression{}
			for _, e := range list {
				got[e.Address] = store.Suppression{Address: e.Address, Reason: e.Reason, Source: e.Source}
			}
			require.Equal(t, map[string]store.Suppression{
				"Bob@example.com": {Address: "Bob@example.com", Reason: "permanent bounce General: 550 5.1.1 <<address>> unknown", Source: store.SourceBounce},
			}, got)

			// Webhook ids are forgotten after the window only.
			n, err := st.DeleteOldWebhooks(ctx, time.Hour, 100)
			require.NoError(t, err)
			require.Zero(t, n)
			sc.Exec(t, `UPDATE webhook_event SET received_at = now() - interval '2 hours' WHERE webhook_id IN ('msg_d1', 'msg_b1')`)
			n, err = st.DeleteOldWebhooks(ctx, time.Hour, 1)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "at most the limit")
			n, err = st.DeleteOldWebhooks(ctx, time.Hour, 100)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM webhook_event`))
		})
	}
}

func TestSuppressionListInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			e, added, err := st.Suppress(ctx, "  Alice.Smith@Example.COM\t", "asked by phone", store.SourceOperator)
			require.NoError(t, err)
			require.True(t, added)
			require.Equal(t, "Alice.Smith@example.com", e.Address, "domain lower-cased, local part kept, spaces trimmed")
			require.Equal(t, store.SourceOperator, e.Source)
			require.Equal(t, "asked by phone", e.Reason)
			require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)

			again, added, err := st.Suppress(ctx, "Alice.Smith@EXAMPLE.com", "another reason", store.SourceBounce)
			require.NoError(t, err)
			require.False(t, added, "the same address, compared normalised")
			require.Equal(t, e.Reason, again.Reason, "the first entry's reason is kept")
			require.Equal(t, e.Source, again.Source, "and its source")
			require.Equal(t, e.CreatedAt, again.CreatedAt)
			require.Equal(t, 2, again.Seen, "the second report is counted")
			require.False(t, again.LastSeen.Before(e.LastSeen))
			e = again
			_, added, err = st.Suppress(ctx, "alice.smith@example.com", "", store.SourceOperator)
			require.NoError(t, err)
			require.True(t, added, "the local part's case is significant (RFC 5321 section 2.4)")

			list, err := st.Suppressions(ctx)
			require.NoError(t, err)
			require.Len(t, list, 2)
			require.Equal(t, e, list[0], "oldest first")

			gone, err := st.Unsuppress(ctx, " alice.smith@Example.com")
			require.NoError(t, err)
			require.Equal(t, "alice.smith@example.com", gone.Address)
			_, err = st.Unsuppress(ctx, "alice.smith@example.com")
			require.ErrorIs(t, err, store.ErrNotFound)
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM suppression`))
		})
	}
}

func TestSuppressionAddressForms(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for in, want := range map[string]string{
		"x@ÉXAMPLE.Com":        "x@Éxample.com", // only ASCII letters are folded, whatever the locale
		`"a@b"@Host.Example`:   `"a@b"@host.example`,
		"UPPER@[192.0.2.1]":    "UPPER@[192.0.2.1]",
		"\r\n m@x.ORG \r\n":    "m@x.org",
		"o'brien+tag@Mail.COM": "o'brien+tag@mail.com",
	} {
		e, _, err := sc.Store.Suppress(ctx, in, "r", store.SourceOperator)
		require.NoError(t, err, in)
		require.Equal(t, want, e.Address, in)
	}
	for _, bad := range []string{"", "   ", "no-at", "@example.com", "a@", "a b@example.com", "a@exa\nmple.com"} {
		_, _, err := sc.Store.Suppress(ctx, bad, "r", store.SourceOperator)
		require.ErrorIs(t, err, store.ErrInvalidAddress, "%q", bad)
	}
	e, _, err := sc.Store.Suppress(ctx, "r@example.com", strings.Repeat("é", 150)+" for a.b@example.com", store.SourceOperator)
	require.NoError(t, err)
	require.Len(t, e.Reason, store.MaxSuppressionReason)
	require.EqualValues(t, 6, sc.QueryInt(t, `SELECT count(*) FROM suppression`))
}

// The claim says which taken rows go to a suppressed recipient, compared
// normalised; the others are unaffected.
func TestClaimFlagsSuppressedRecipients(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for order, to := range map[string]string{"1": " Ann@EXAMPLE.com ", "2": "ann@example.com", "3": "bob@example.com"} {
		_, err := storetest.InsertPending(ctx, sc.Store, storetest.Mail{OrderID: order, ToEmail: to})
		require.NoError(t, err)
	}
	_, _, err := sc.Store.Suppress(ctx, "Ann@example.com", "bounce", store.SourceBounce)
	require.NoError(t, err)
	got, err := sc.Store.ClaimMails(ctx, claimParams(10))
	require.NoError(t, err)
	flags := map[string]bool{}
	for _, m := range got {
		flags[m.OrderID] = m.Suppressed
	}
	require.Equal(t, map[string]bool{"1": true, "2": false, "3": false}, flags)
}

// A complaint suppresses the mail's own stored recipient, not only the
// spelling the provider reports in data.to: a provider that lower-cases
// the local part must not let the complainer be mailed again.
func TestComplaintSuppressesTheStoredRecipient(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{})
	ctx := testCtx(t)
	sentByResend(t, st, "7", "Yuri@Example.COM", "em_7")
	res, err := st.RecordWebhook(ctx, store.Webhook{Provider: "resend", ID: "msg_c7", Type: "email.complained",
		At: time.Now().UTC(), EmailID: "em_7", Effect: store.EffectComplained, Recipients: []string{"yuri@example.com"}, Reason: "spam"})
	require.NoError(t, err)
	require.Equal(t, store.WebhookResult{Matched: 1, Suppressed: 1, Events: []mailtype.EventType{mailtype.EmailComplained}}, res)
	require.Equal(t, []string{"Yuri@example.com"}, sc.QueryStrings(t, `SELECT address FROM suppression`),
		"the stored recipient only, never the report's spelling of it")
	_, err = storetest.InsertPending(ctx, st, storetest.Mail{OrderID: "8", ToEmail: "Yuri@Example.COM"})
	require.NoError(t, err)
	got, err := st.ClaimMails(ctx, claimParams(1))
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Suppressed, "the stored spelling of the recipient is suppressed")
}
