package sender_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

func TestJanitorRound(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	ids := make([]int64, 6)
	for i := range ids {
		ids[i] = b.insert(t, string(rune('a'+i)))
	}
	// 0: lease expired on the last attempt; 1: lease expired, cancel
	// requested; 2: sent long ago; 3: unknown long ago; 4: sent recently;
	// 5: pending.
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 3, locked_until = now() - interval '1 second' WHERE id = $1`, ids[0])
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, cancel_requested = true,
		locked_until = now() - interval '1 second' WHERE id = $1`, ids[1])
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', updated_at = now() - interval '15 days' WHERE id = $1`, ids[2])
	b.sc.Exec(t, `UPDATE mail SET status = 'unknown', updated_at = now() - interval '15 days' WHERE id = $1`, ids[3])
	b.sc.Exec(t, `UPDATE mail SET status = 'sent' WHERE id = $1`, ids[4])

	var woke atomic.Int32
	j, err := sender.NewJanitor(sender.JanitorConfig{MaxAttempts: 3, RetentionWindow: 14 * 24 * time.Hour, BatchSize: 1},
		b.sc.Store, nil, func() { woke.Add(1) })
	require.NoError(t, err)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, sender.Round{Expired: 2, Deleted: 1, Unknown: 1}, r)
	require.Equal(t, int32(2), woke.Load())

	b.waitRow(t, ids[0], mailtype.StatusFailed, 3)
	b.waitRow(t, ids[1], mailtype.StatusCancelled, 1)
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE id = $1`, ids[2]))
	require.EqualValues(t, 5, b.count(t, `SELECT count(*) FROM mail`))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailCancelled))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1
		AND last_error = 'attempts_exhausted: lease_expired'`, ids[0]))

	again, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, sender.Round{Unknown: 1}, again)
}

func TestJanitorLoopStartsAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "a")
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 2, locked_until = now() - interval '1 second' WHERE id = $1`, id)
	j, err := sender.NewJanitor(sender.JanitorConfig{MaxAttempts: 2, Interval: 20 * time.Millisecond}, b.sc.Store, nil, nil)
	require.NoError(t, err)
	require.NoError(t, j.Stop(context.Background()), "Stop without Start")
	j, err = sender.NewJanitor(sender.JanitorConfig{MaxAttempts: 2, Interval: 20 * time.Millisecond}, b.sc.Store, nil, nil)
	require.NoError(t, err)
	require.NoError(t, j.Start(context.Background()))
	b.waitRow(t, id, mailtype.StatusFailed, 2)
	require.NoError(t, j.Stop(context.Background()))
	require.NoError(t, j.Stop(context.Background()))
	require.Error(t, j.Start(context.Background()))
}

// TestJanitorCancelsAnInterruptedSendAsUnknownOutcome is the SIGKILL case:
// a send took DATA and hung, the order was cancelled, the process died. The
// janitor cancels the row (it is never retried) after 1 of 8 attempts; its
// last_error and its one feedback event say that the outcome of the
// interrupted send is unknown, not that attempts ran out.
func TestJanitorCancelsAnInterruptedSendAsUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, cancel_requested = true,
		locked_by = 'killed', locked_until = now() - interval '1 second' WHERE id = $1`, id)
	j, err := sender.NewJanitor(sender.JanitorConfig{MaxAttempts: 8}, b.sc.Store, nil, nil)
	require.NoError(t, err)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, r.Expired)

	b.waitRow(t, id, mailtype.StatusCancelled, 1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND last_error =
		'lease_expired: the lease expired during a send whose outcome is unknown; the mail may have been delivered'`, id))
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE last_error LIKE '%attempts_exhausted%'`))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`), "exactly one terminal event")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = $1
		AND payload->'data'->>'error_class' = 'ambiguous' AND payload->'data'->>'error_reason' = 'lease_expired'`,
		string(mailtype.EmailCancelled)))

	again, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, again.Expired)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
}
