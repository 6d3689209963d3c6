package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// recordingNotices renders a fixed notice and records what it was asked
// for; these tests are about which rows and events a cancel writes, the
// template has its own tests. fail makes it refuse.
type recordingNotices struct {
	asked []store.NoticeSource
	fail  bool
}

func (r *recordingNotices) RenderNotice(src store.NoticeSource) (store.NewMail, error) {
	r.asked = append(r.asked, src)
	if r.fail {
		return store.NewMail{}, errors.New("template exploded")
	}
	key := mailtype.CancelNoticeKey(src.OrderID, src.Revision)
	return store.NewMail{
		EventID: src.CancelEventID, DedupeKey: key, OrderID: src.OrderID, Revision: src.Revision,
		Template: mailtype.TemplateCancelNotice, Locale: src.Locale, ToEmail: src.ToEmail, Payload: src.Payload,
		Subject: "cancelled", BodyText: "x", MessageID: mailtype.MessageID(key, "example.com"),
		From: "Shop <orders@example.com>", OccurredAt: time.Now(),
	}, nil
}

func confirmRev(orderID string, rev int) store.IngestItem {
	it := confirmKey(uuid.NewString(), mailtype.ConfirmationKeyAt(orderID, rev), orderID)
	it.Mail.Revision = rev
	return it
}

func cancelRev(orderID string, rev int) store.IngestItem {
	it := cancelOf(orderID)
	it.Cancel.Revision = rev
	return it
}

// contractBundle is an ingest bundle whose store writes notices.
type contractBundle struct {
	*ingestBundle
	st      *store.Store
	notices *recordingNotices
}

func setupContract(t *testing.T) *contractBundle {
	t.Helper()
	b := setupIngest(t)
	n := &recordingNotices{}
	return &contractBundle{ingestBundle: b, st: b.sc.Open(t, store.Options{Notices: n}), notices: n}
}

func (b *contractBundle) ingest(t *testing.T, items ...store.IngestItem) []mailtype.Disposition {
	t.Helper()
	res, err := b.st.Ingest(b.ctx, items)
	require.NoError(t, err)
	out := make([]mailtype.Disposition, len(res))
	for i, r := range res {
		out[i] = r.Disposition
	}
	return out
}

// events lists the outbox rows of an order, in write order, as
// "type dedupe_key".
func (b *contractBundle) events(t *testing.T, orderID string) []string {
	t.Helper()
	m := b.sc.QueryMap(t, `SELECT lpad((row_number() OVER (ORDER BY id))::text, 3, '0'), event_type || ' ' || dedupe_key
		FROM outbox WHERE order_id = $1`, orderID)
	var out []string
	for i := 1; i <= len(m); i++ {
		out = append(out, m[fmt.Sprintf("%03d", i)])
	}
	return out
}

// The cells of the outcome table (docs/contract.md) that a cancel decides
// alone, from the state the confirmation is in when it arrives. Each
// cell is cancelled twice: the redelivery changes and publishes nothing.
func TestCancelOutcomeTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		state   string // SQL SET clause putting the confirmation in the state; "" = leave it pending; "-" = no row
		outcome mailtype.Disposition
		status  mailtype.Status
		events  []string
		notice  bool
	}{
		{"pending", "", mailtype.DispositionCancelled, mailtype.StatusCancelled,
			[]string{"EmailCancelled order-confirmed:K"}, false},
		{"pending after an ambiguous send", "attempts = 1, sends = 1, ambiguous = 1", mailtype.DispositionTooLate, mailtype.StatusUnknown,
			[]string{"EmailUnknown order-confirmed:K", "EmailCancelTooLate order-confirmed:K"}, true},
		{"claimed", "status = 'sending', attempts = 1, locked_until = now() + interval '1 minute'", mailtype.DispositionCancelled, mailtype.StatusSending,
			nil, false},
		{"sending", "status = 'sending', attempts = 1, sends = 1, send_started_at = now(), locked_until = now() + interval '1 minute'",
			mailtype.DispositionCancelled, mailtype.StatusSending, nil, false},
		{"sent", "status = 'sent', attempts = 1, sends = 1, sent_at = now()", mailtype.DispositionTooLate, mailtype.StatusSent,
			[]string{"EmailCancelTooLate order-confirmed:K"}, true},
		{"unknown", "status = 'unknown', attempts = 1, sends = 1, ambiguous = 1", mailtype.DispositionTooLate, mailtype.StatusUnknown,
			[]string{"EmailCancelTooLate order-confirmed:K"}, true},
		{"failed", "status = 'failed', attempts = 1, sends = 1", mailtype.DispositionDuplicate, mailtype.StatusFailed, nil, false},
		{"cancelled", "status = 'cancelled', cancel_event_id = '00000000-0000-4000-8000-000000000001'", mailtype.DispositionDuplicate, mailtype.StatusCancelled, nil, false},
		{"no confirmation yet", "-", mailtype.DispositionTombstoned, mailtype.StatusCancelled,
			[]string{"EmailCancelled order-confirmed:K"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupContract(t)
			const order = "K"
			if tc.state != "-" {
				b.ingest(t, confirm(order))
				if tc.state != "" {
					b.sc.Exec(t, `UPDATE mail SET `+tc.state+` WHERE order_id = $1`, order)
				}
			}
			c := cancelOf(order)
			require.Equal(t, []mailtype.Disposition{tc.outcome, mailtype.DispositionDuplicate}, b.ingest(t, c, c))
			require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, cancelOf(order)), "another cancel of the same order")
			require.Equal(t, tc.events, b.events(t, order))
			for typ, payload := range b.sc.QueryMap(t, `SELECT event_type, payload::text FROM outbox`) {
				require.Empty(t, api.ValidateFeedback(typ, []byte(payload)), "%s %s", typ, payload)
			}
			recorded := c.Cancel.EventID
			if tc.status == mailtype.StatusCancelled && tc.outcome == mailtype.DispositionDuplicate {
				recorded = "00000000-0000-4000-8000-000000000001" // its own cancel's, untouched
			}
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:K' AND status = $1
				AND cancel_event_id = $2`, string(tc.status), recorded), "the first cancel is recorded on the row")
			notices := int64(0)
			if tc.notice {
				notices = 1
				require.Len(t, b.notices.asked, 1)
				require.Equal(t, store.NoticeSource{DedupeKey: "order-confirmed:K", OrderID: order, Revision: 1, Locale: "vi",
					ToEmail: "b@example.com", Payload: []byte(`{"order_id": "K"}`), CancelEventID: c.Cancel.EventID,
					ConfirmedAt: b.notices.asked[0].ConfirmedAt}, b.notices.asked[0])
			}
			require.Equal(t, notices, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-cancelled:K'
				AND status = 'pending' AND template = 'order_cancelled' AND event_id = $1`, c.Cancel.EventID))
		})
	}
}

// A notice that cannot be rendered is recorded failed with EmailFailed,
// never lost silently, and does not hold up the cancel.
func TestCancelNoticeThatCannotRenderIsFailed(t *testing.T) {
	t.Parallel()
	b := setupContract(t)
	b.notices.fail = true
	b.ingest(t, confirm("R"))
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sends = 1, sent_at = now()`)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTooLate}, b.ingest(t, cancelOf("R")))
	require.Equal(t, []string{"EmailCancelTooLate order-confirmed:R", "EmailFailed order-cancelled:R"}, b.events(t, "R"))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-cancelled:R' AND status = 'failed'
		AND last_error = 'render: template exploded' AND last_error_class = 'permanent'`))
}

// A reopened order: revision 1 is cancelled (a tombstone, since its
// confirmation never came), revision 2 is confirmed under its own key
// and sent; a late cancel of revision 1 and a late confirmation of
// revision 1 touch nothing of revision 2; the cancel of revision 2 is too
// late for it alone, and its notice is keyed by revision.
func TestReopenedOrderRevisions(t *testing.T) {
	t.Parallel()
	b := setupContract(t)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTombstoned}, b.ingest(t, cancelRev("O", 1)))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate, mailtype.DispositionInserted},
		b.ingest(t, confirmRev("O", 1), confirmRev("O", 2)), "revision 1 is tombstoned, revision 2 is new")
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sends = 1, sent_at = now() WHERE dedupe_key = 'order-confirmed:O:r2'`)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, cancelRev("O", 1)), "a late cancel of revision 1")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTooLate}, b.ingest(t, cancelRev("O", 2)))
	require.Equal(t, []string{"EmailCancelled order-confirmed:O", "EmailCancelTooLate order-confirmed:O:r2"}, b.events(t, "O"))
	require.Equal(t, map[string]string{"order-confirmed:O": "1", "order-confirmed:O:r2": "2", "order-cancelled:O:r2": "2"},
		b.sc.QueryMap(t, `SELECT dedupe_key, revision::text FROM mail`))
	require.EqualValues(t, 2, b.count(t, `SELECT (payload->'data'->>'revision')::int FROM outbox WHERE dedupe_key = 'order-confirmed:O:r2'`),
		"feedback events carry the revision")
}

// mail resend never mails a confirmation of a cancelled order revision,
// whatever the row's own status; a cancellation notice may be resent, and
// another revision is not affected.
func TestResendRefusesACancelledOrder(t *testing.T) {
	t.Parallel()
	b := setupContract(t)
	b.ingest(t, confirm("S"), confirm("F"), confirmRev("S", 2))
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sends = 1, sent_at = now() WHERE order_id = 'S'`)
	b.sc.Exec(t, `UPDATE mail SET status = 'failed', attempts = 1, sends = 1 WHERE order_id = 'F'`)
	b.ingest(t, cancelOf("S"), cancelOf("F"))
	ctx := context.Background()
	for _, key := range []string{"order-confirmed:S", "order-confirmed:F"} {
		_, err := b.st.Resend(ctx, key, "example.com", "")
		var se *store.StateError
		require.ErrorAs(t, err, &se, key)
		require.Contains(t, err.Error(), "was cancelled", key)
	}
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', sent_at = now() WHERE dedupe_key = 'order-cancelled:S'`)
	key, err := b.st.Resend(ctx, "order-cancelled:S", "example.com", "")
	require.NoError(t, err, "a notice may be resent")
	require.Equal(t, "order-cancelled:S:resend:1", key)
	key, err = b.st.Resend(ctx, "order-confirmed:S:r2", "example.com", "")
	require.NoError(t, err, "revision 2 was not cancelled")
	require.EqualValues(t, 2, b.count(t, `SELECT revision FROM mail WHERE dedupe_key = $1`, key))
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key LIKE 'order-confirmed:_:resend:%'`))
}

// A claim that never started its send, on a mail whose earlier send was
// ambiguous, may still not end cancelled or failed when it is released:
// the earlier send may have delivered the mail. A cancel requested while
// the claim waited (the release by the worker, or by the janitor once the
// lease expired) ends it unknown (EmailUnknown, EmailCancelTooLate and
// the notice), exactly like a cancel of the pending mail would have; a
// mail found stale ends unknown too, never failed. Without an earlier
// ambiguous send the same releases end cancelled and failed.
func TestReleaseAfterAnAmbiguousSend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		ambiguous int
		cancel    bool
		outcome   store.Outcome
		settle    bool
		status    mailtype.Status
		events    []string
		reason    string
	}{
		{"worker releases a cancelled claim", 1, true, store.Outcome{Status: mailtype.StatusPending,
			IfCancelRequested: mailtype.StatusCancelled, Release: true}, false, mailtype.StatusUnknown,
			[]string{"EmailUnknown order-confirmed:K", "EmailCancelTooLate order-confirmed:K"}, "cancelled_after_ambiguous"},
		{"janitor releases a cancelled expired claim", 1, true, store.Outcome{Status: mailtype.StatusPending,
			IfCancelRequested: mailtype.StatusCancelled, Release: true}, true, mailtype.StatusUnknown,
			[]string{"EmailUnknown order-confirmed:K", "EmailCancelTooLate order-confirmed:K"}, "cancelled_after_ambiguous"},
		{"stale after an ambiguous send", 1, false, store.Outcome{Status: mailtype.StatusFailed,
			IfCancelRequested: mailtype.StatusCancelled, Release: true, ErrorClass: mailtype.Permanent,
			ErrorReason: mailtype.ReasonStale, Error: "too old"}, false, mailtype.StatusUnknown,
			[]string{"EmailUnknown order-confirmed:K"}, "stale"},
		{"cancelled claim, no ambiguous send", 0, true, store.Outcome{Status: mailtype.StatusPending,
			IfCancelRequested: mailtype.StatusCancelled, Release: true}, false, mailtype.StatusCancelled,
			[]string{"EmailCancelled order-confirmed:K"}, ""},
		{"stale, no ambiguous send", 0, false, store.Outcome{Status: mailtype.StatusFailed,
			IfCancelRequested: mailtype.StatusCancelled, Release: true, ErrorClass: mailtype.Permanent,
			ErrorReason: mailtype.ReasonStale, Error: "too old"}, false, mailtype.StatusFailed,
			[]string{"EmailFailed order-confirmed:K"}, "stale"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupContract(t)
			const order = "K"
			b.ingest(t, confirm(order))
			lease := "now() + interval '1 minute'"
			if tc.settle {
				lease = "now() - interval '1 second'"
			}
			b.sc.Exec(t, fmt.Sprintf(`UPDATE mail SET status = 'sending', attempts = 2, sends = 1, ambiguous = %d,
				locked_until = %s, locked_by = 'w' WHERE order_id = $1`, tc.ambiguous, lease), order)
			if tc.cancel {
				require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled}, b.ingest(t, cancelOf(order)), "the cancel is only requested")
			}
			id := b.count(t, `SELECT id FROM mail WHERE order_id = $1`, order)
			res, err := b.st.FinishAttempts(b.ctx, []store.Attempt{{Fence: store.Fence{ID: id, Token: 2}, Outcome: tc.outcome, Settle: tc.settle}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			require.Equal(t, tc.status, res[0].Status)
			require.Equal(t, tc.events[0][:strings.IndexByte(tc.events[0], ' ')], string(res[0].Event))
			notice := int64(0)
			if len(tc.events) == 2 {
				notice = 1
			}
			require.Equal(t, tc.events, b.events(t, order)[:len(tc.events)])
			require.Equal(t, notice, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-cancelled:K'`))
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = $1 AND template = 'order_confirmed'
				AND status = $2 AND sends = 1 AND ambiguous = $3 AND send_started_at IS NULL`, order, string(tc.status), tc.ambiguous))
			require.Equal(t, map[string]string{tc.events[0][:strings.IndexByte(tc.events[0], ' ')]: tc.reason},
				b.sc.QueryMap(t, `SELECT event_type, coalesce(payload->'data'->>'error_reason', '') FROM outbox
					WHERE event_type <> 'EmailCancelTooLate' AND dedupe_key = 'order-confirmed:K'`))
			for typ, payload := range b.sc.QueryMap(t, `SELECT event_type, payload::text FROM outbox`) {
				require.Empty(t, api.ValidateFeedback(typ, []byte(payload)), "%s %s", typ, payload)
			}
		})
	}
}
