package bounce_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/bounce"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// unknownBySMTP writes a mail to `to` whose SMTP send lost its reply to
// the message data and ended unknown, and returns its id.
func (h *harness) unknownBySMTP(t *testing.T, order, to string) int64 {
	t.Helper()
	return h.finishedBySMTP(t, order, to, store.Outcome{Status: mailtype.StatusUnknown, Provider: "smtp",
		ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonTimeout,
		Error: "the reply to the message data was lost", Ambiguous: true})
}

// Delivery status notifications settle unknown SMTP mails (RFC 3464
// section 2.3.3, Action): a success report (delivered, relayed, expanded,
// asked with NOTIFY=SUCCESS) makes the mail sent and delivered, a failure
// report sent then failed, each with EmailSent marked reconciled_by
// provider_evidence first; a delay report settles nothing. For a mail
// already sent, a success report, and each copy of it, sets delivered_at
// and writes EmailDelivered once.
func TestDSNSettlesUnknownMail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bounce.Config{AcceptDelivered: true})
	delivered := h.unknownBySMTP(t, "1", "ann@example.com")
	relayed := h.unknownBySMTP(t, "2", "bob@example.com")
	gone := h.unknownBySMTP(t, "3", "gone@example.com")
	slow := h.unknownBySMTP(t, "4", "slow@example.com")
	sent := h.sentBySMTP(t, "5", "dan@example.com")

	require.NoError(t, h.deliver(verp.Address(delivered), dsn("delivered", "2.0.0")))
	require.NoError(t, h.deliver(verp.Address(relayed), dsn("relayed", "2.0.0")))
	require.NoError(t, h.deliver(verp.Address(gone), dsn("failed", "5.1.1")))
	require.NoError(t, h.deliver(verp.Address(slow), dsn("delayed", "4.4.7")))
	require.NoError(t, h.deliver(verp.Address(sent), dsn("delivered", "2.0.0")))
	require.NoError(t, h.deliver(verp.Address(sent), "Subject: a copy\n"+dsn("delivered", "2.0.0")), "a copy of the report")
	require.NoError(t, h.deliver(verp.Address(delivered), dsn("delivered", "2.0.0")), "a copy, after the settlement")

	require.Equal(t, map[string]string{"1": "sent", "2": "sent", "3": "failed", "4": "unknown", "5": "sent"},
		h.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.Equal(t, map[string]string{"1": "email.delivered", "2": "email.delivered", "3": "email.bounced"},
		h.sc.QueryMap(t, `SELECT order_id, evidence_type FROM mail WHERE reconciled_by = 'provider_evidence'
			AND evidence_id = 'dsn:' || id || CASE WHEN order_id = '3' THEN ':permanent:5.1.1' ELSE ':delivered:2.0.0' END`))
	require.EqualValues(t, 3, h.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE delivered_at IS NOT NULL`))
	want := map[string][]string{
		"1": {"EmailUnknown", "EmailSent provider_evidence email.delivered", "EmailDelivered provider_evidence email.delivered"},
		"2": {"EmailUnknown", "EmailSent provider_evidence email.delivered", "EmailDelivered provider_evidence email.delivered"},
		"3": {"EmailUnknown", "EmailSent provider_evidence email.bounced", "EmailBounced provider_evidence email.bounced"},
		"4": {"EmailUnknown"},
		"5": {"EmailSent", "EmailDelivered email.delivered"},
	}
	for order, events := range want {
		require.Equal(t, events, h.sc.QueryStrings(t, `SELECT concat_ws(' ', event_type, payload#>>'{data,reconciled_by}',
			payload#>>'{data,provider_event,type}') FROM outbox WHERE order_id = $1 ORDER BY id`, order), order)
	}
	require.Equal(t, map[string]string{"gone@example.com": "dsn/bounce"}, h.sc.QueryMap(t, `SELECT address, source FROM suppression`))
	require.Equal(t, 3, counter(t, h.metrics.Reports.WithLabelValues("delivered", "true")), "one a mail: the copies are duplicates")
}
