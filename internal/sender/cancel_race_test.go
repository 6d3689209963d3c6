package sender_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
)

// stubNotices writes a fixed cancellation notice: these tests are about
// which events a cancel racing a send leads to, not about the template
// (internal/templates and the end-to-end tests render the real one).
type stubNotices struct{}

func (stubNotices) RenderNotice(src store.NoticeSource) (store.NewMail, error) {
	key := mailtype.CancelNoticeKey(src.OrderID, src.Revision)
	return store.NewMail{
		EventID: src.CancelEventID, DedupeKey: key, OrderID: src.OrderID, Revision: src.Revision,
		Template: mailtype.TemplateCancelNotice, Locale: src.Locale, ToEmail: src.ToEmail, Payload: src.Payload,
		Subject: "Order cancelled", BodyText: "cancelled\n", MessageID: mailtype.MessageID(key, "example.com"),
		From: from, ToName: src.ToName, OccurredAt: time.Now(),
	}, nil
}

// A cancel that reaches a mail while its send is on the wire (the SMTP
// server holds DATA) publishes nothing at once; the send's outcome
// decides, and the mail gets exactly one delivery outcome event. Only a
// send that was, or may have been, delivered is followed by
// EmailCancelTooLate and a cancellation notice (itself sent, with its own
// EmailSent).
func TestCancelRacingASend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		then smtptest.Fault
		// status is the confirmation's final status; events the outbox, in
		// order, as "type template"; deliveries what the server took.
		status     mailtype.Status
		events     []string
		deliveries int
	}{
		{"sent", smtptest.Accept(), mailtype.StatusSent,
			[]string{"EmailSent order_confirmed", "EmailCancelTooLate order_confirmed", "EmailSent order_cancelled"}, 2},
		{"transient failure", smtptest.Reply(451, "4.3.0 try later"), mailtype.StatusCancelled,
			[]string{"EmailCancelled order_confirmed"}, 0},
		{"permanent failure", smtptest.Reply(550, "5.1.1 no such user"), mailtype.StatusCancelled,
			[]string{"EmailCancelled order_confirmed"}, 0},
		{"ambiguous", smtptest.Drop(), mailtype.StatusUnknown,
			[]string{"EmailUnknown order_confirmed", "EmailCancelTooLate order_confirmed", "EmailSent order_cancelled"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			st := b.sc.Open(t, store.Options{Notices: stubNotices{}})
			id := b.insert(t, "70")
			release := make(chan struct{})
			b.srv.Inject(smtptest.Data, smtptest.Hold(release, tc.then))
			cfg := testConfig()
			cfg.SendTimeout, cfg.Lease = 5*time.Second, 10*time.Second
			b.start(t, cfg, sender.Deps{Store: st})
			require.Eventually(t, func() bool { return b.srv.Delaying() == 1 }, 10*time.Second, 5*time.Millisecond, "the send reaches DATA")

			cancel := store.Cancel{EventID: uuid.NewString(), OrderID: "70", Template: "order_confirmed"}
			res, err := st.Ingest(context.Background(), []store.IngestItem{{Cancel: &cancel}})
			require.NoError(t, err)
			require.Equal(t, mailtype.DispositionCancelled, res[0].Disposition, "the cancel is requested")
			require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM outbox`), "nothing is published while the send is on the wire")
			close(release)

			require.Eventually(t, func() bool { return int(b.count(t, `SELECT count(*) FROM outbox`)) == len(tc.events) },
				10*time.Second, 10*time.Millisecond, "events %v", tc.events)
			require.Equal(t, tc.events, outboxEvents(t, b))
			requireOutboxValid(t, b)
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = $2 AND cancel_event_id = $3`,
				id, string(tc.status), cancel.EventID))
			require.Equal(t, tc.deliveries, b.srv.Count())
			notices := 0
			if tc.deliveries > 0 {
				notices = 1
				require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelTooLate'
					AND payload->'data'->>'source_event_id' = $1`, cancel.EventID), "too late names the cancel")
			}
			require.EqualValues(t, notices, b.count(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-cancelled:70'
				AND status = 'sent' AND event_id = $1`, cancel.EventID))

			// A redelivered cancel changes and publishes nothing.
			res, err = st.Ingest(context.Background(), []store.IngestItem{{Cancel: &cancel}})
			require.NoError(t, err)
			require.Equal(t, mailtype.DispositionDuplicate, res[0].Disposition)
			require.EqualValues(t, len(tc.events), b.count(t, `SELECT count(*) FROM outbox`))
		})
	}
}

// outboxEvents lists the outbox rows in write order as "type template".
func outboxEvents(t *testing.T, b *bundle) []string {
	t.Helper()
	m := b.sc.QueryMap(t, `SELECT lpad((row_number() OVER (ORDER BY id))::text, 3, '0'), event_type || ' ' || (payload->'data'->>'template') FROM outbox`)
	out := make([]string, len(m))
	for i := range out {
		out[i] = m[fmt.Sprintf("%03d", i+1)]
	}
	return out
}

// A mail whose provider stays down past its max event age is not handed
// over once it is too old: it ends failed with reason stale and one
// EmailFailed, exactly as a stale event at ingest, and the server sees no
// further attempt. The relay's 421 (closing the channel) is an outage:
// the first one alone spends an attempt, the ones after it in a row
// spend none.
func TestStaleAtSendTime(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	down := make([]smtptest.Fault, 500)
	for i := range down {
		down[i] = smtptest.Reply(421, "4.3.2 service not available")
	}
	b.srv.Inject(smtptest.Mail, down...)
	id := b.insert(t, "71")
	cfg := testConfig()
	cfg.MaxAttempts, cfg.MaxEventAge = 1000, 1500*time.Millisecond // room for a second try on a loaded machine
	_, m := b.start(t, cfg, sender.Deps{})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'failed' AND last_error LIKE 'stale: %'`, id) == 1
	}, 15*time.Second, 10*time.Millisecond)
	tried := b.srv.MailCommands()
	require.Positive(t, tried, "the provider was tried while the mail was young")
	require.GreaterOrEqual(t, tried, 2, "the provider was tried again while the mail was young")
	require.EqualValues(t, 1, b.count(t, `SELECT sends FROM mail WHERE id = $1`, id), "only the first 421 spent; the outage and the stale verdict spend none")
	require.Equal(t, 1, attempts(m, "smtp", sender.OutcomeTransient))
	require.EqualValues(t, tried-1, value(m.Unspent.WithLabelValues("smtp", string(sender.TroubleOutage))))
	require.Equal(t, map[string]string{"EmailFailed": "stale"},
		b.sc.QueryMap(t, `SELECT event_type, payload->'data'->>'error_reason' FROM outbox`))
	require.Equal(t, 0, b.srv.Count())
}

// requireOutboxValid checks every outbox payload against the published
// JSON Schema of its event type (api/schemas).
func requireOutboxValid(t *testing.T, b *bundle) {
	t.Helper()
	for typ, payloads := range b.sc.QueryMap(t, `SELECT event_type, json_agg(payload)::text FROM outbox GROUP BY 1`) {
		var all []json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(payloads), &all))
		for _, p := range all {
			require.Empty(t, api.ValidateFeedback(typ, p), "%s %s", typ, p)
		}
	}
}
