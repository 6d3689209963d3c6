package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// The sender's statements (claim, lease renewals, finishing attempts, the
// janitor's) in every pgx query exec mode; see execmode_test.go.
func TestSendPathInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			outcomesOf(t, st, modeConfirm("1"), modeConfirm("2"), modeConfirm("3"), modeConfirm("4"))

			p := store.ClaimParams{Limit: 4, Lease: time.Minute, Worker: "w-" + mode}
			got, err := st.ClaimMails(ctx, p)
			require.NoError(t, err)
			require.Len(t, got, 4)
			byOrder := map[string]store.ClaimedMail{}
			fences := make([]store.Fence, 0, len(got))
			for _, m := range got {
				require.Equal(t, 1, m.Token)
				require.False(t, m.Reclaimed)
				require.Equal(t, "Nguyễn Văn B", m.ToName)
				require.Equal(t, []string{"b@example.com", "s", "t", "<p>t</p>"}, []string{m.ToEmail, m.Subject, m.BodyText, m.BodyHTML})
				require.WithinDuration(t, time.Now().Add(time.Minute), m.LockedUntil, 30*time.Second)
				byOrder[m.OrderID] = m
				fences = append(fences, m.Fence)
			}
			require.EqualValues(t, 4, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND attempts = 1 AND locked_by = $1`, p.Worker))

			renewed, err := st.RenewLeases(ctx, fences, time.Hour)
			require.NoError(t, err)
			require.ElementsMatch(t, fences, renewed)
			require.EqualValues(t, 4, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE locked_until > now() + interval '59 minutes'`))
			started, err := st.MarkStarted(ctx, fences, store.StartLease{Renew: time.Hour, Keep: time.Hour})
			require.NoError(t, err)
			require.Len(t, started, 4)
			require.EqualValues(t, 4, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE sends = 1 AND send_started_at IS NOT NULL`))

			res, err := st.FinishAttempts(ctx, []store.Attempt{
				{Fence: byOrder["1"].Fence, Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "pm-1"}},
				{Fence: byOrder["2"].Fence, Outcome: store.Outcome{Status: mailtype.StatusPending, RetryAfter: time.Hour, Provider: "smtp",
					ErrorClass: mailtype.Transient, ErrorReason: mailtype.ReasonDeferred, Error: "451 later"}},
				{Fence: byOrder["3"].Fence, Outcome: store.Outcome{Status: mailtype.StatusFailed, Provider: "smtp",
					ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonRejected, Error: "550 no"}},
				{Fence: byOrder["4"].Fence, Outcome: store.Outcome{Status: mailtype.StatusUnknown, Provider: "smtp",
					ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonTimeout, Error: "no reply"}},
			})
			require.NoError(t, err)
			require.Equal(t, []store.AttemptResult{
				{Finished: store.Finished{Status: mailtype.StatusSent, Event: mailtype.EmailSent}},
				{Finished: store.Finished{Status: mailtype.StatusPending}},
				{Finished: store.Finished{Status: mailtype.StatusFailed, Event: mailtype.EmailFailed}},
				{Finished: store.Finished{Status: mailtype.StatusUnknown, Event: mailtype.EmailUnknown}},
			}, statusEvents(res))
			require.Equal(t, map[string]string{"1": "sent", "2": "pending", "3": "failed", "4": "unknown"}, sc.QueryMap(t, `SELECT order_id, status FROM mail`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '1' AND provider_message_id = 'pm-1' AND sent_at IS NOT NULL`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '2'
				AND send_after > now() + interval '59 minutes' AND last_error = 'deferred: 451 later'`))
			requireFeedback(t, sc, map[string]string{"1": "EmailSent", "3": "EmailFailed", "4": "EmailUnknown"})
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE order_id = '3' AND payload->'data'->>'error_reason' = 'rejected'`))

			// The janitor: an expired started send gets its grace, then a
			// settled verdict; finished rows go.
			outcomesOf(t, st, modeConfirm("5"))
			sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 3, sends = 3, send_started_at = now(),
				locked_until = now() - interval '1 second' WHERE order_id = '5'`)
			expired, err := st.ExpiredSends(ctx, 10)
			require.NoError(t, err)
			require.Len(t, expired, 1)
			require.False(t, expired[0].Graced)
			n, err := st.GraceExpired(ctx, []store.Fence{expired[0].Fence}, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			sc.Exec(t, `UPDATE mail SET locked_until = now() - interval '1 second' WHERE order_id = '5'`)
			expired, err = st.ExpiredSends(ctx, 10)
			require.NoError(t, err)
			require.True(t, expired[0].Graced)
			settled, err := st.FinishAttempts(ctx, []store.Attempt{{Fence: expired[0].Fence, Settle: true,
				Outcome: store.Outcome{Status: mailtype.StatusUnknown, ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonLeaseExpired, Ambiguous: true}}})
			require.NoError(t, err)
			require.NoError(t, settled[0].Err)
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '5' AND status = 'unknown' AND ambiguous = 1`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE order_id = '5' AND event_type = 'EmailUnknown'`))
			unknown, err := st.CountUnknown(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 2, unknown)
			deleted, err := st.DeleteFinished(ctx, 0, 10)
			require.NoError(t, err)
			require.EqualValues(t, 2, deleted, "sent 1, failed 3")
			require.Equal(t, map[string]string{"2": "pending", "4": "unknown", "5": "unknown"}, sc.QueryMap(t, `SELECT order_id, status FROM mail`))
		})
	}
}
