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
	"github.com/mailsvc/mailsvc/internal/store"
)

// janitor builds a janitor over the bundle's store with the test pool
// config, adjusted by edit.
func (b *bundle) janitor(t *testing.T, edit func(*sender.JanitorConfig), onOutbox func()) (*sender.Janitor, *sender.Metrics) {
	t.Helper()
	cfg := sender.JanitorConfig{Sender: testConfig(), RetentionWindow: 14 * 24 * time.Hour}
	if edit != nil {
		edit(&cfg)
	}
	m := sender.NewMetrics(nil)
	j, err := sender.NewJanitor(cfg, sender.JanitorDeps{Store: b.sc.Store, Provider: b.smtpProvider(t, "none"),
		Metrics: m, OnOutboxWritten: onOutbox})
	require.NoError(t, err)
	return j, m
}

// expire makes row id a `sending` row whose lease expired with the given
// claim token, sends and earlier ambiguous outcomes; started says whether
// its send had begun, and a started one has had its grace already.
func (b *bundle) expire(t *testing.T, id int64, token, sends, ambiguous int, started bool) {
	t.Helper()
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = $2, sends = $3, ambiguous = $4,
		send_started_at = CASE WHEN $5 THEN now() - interval '1 minute' END,
		locked_by = CASE WHEN $5 THEN $6 ELSE 'killed' END, locked_until = now() - interval '1 second',
		first_claimed_at = now() WHERE id = $1`,
		id, token, sends, ambiguous, started, store.GraceHolder)
}

// TestJanitorGivesAStartedSendAGraceFirst: the owner of an expired send
// may be alive behind a database outage; the first round only extends the
// lease by the grace, measured from now on the database clock, and the
// owner's answer recorded within it is the outcome.
func TestJanitorGivesAStartedSendAGraceFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	late, silent := b.insert(t, "l"), b.insert(t, "s")
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, sends = 1, send_started_at = now() - interval '1 hour',
		locked_by = 'host/1', locked_until = now() - interval '30 minutes', first_claimed_at = now() - interval '1 hour'`)
	j, _ := b.janitor(t, nil, nil)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, r.Settled)
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND locked_by = $1
		AND locked_until BETWEEN now() + $2::interval - interval '2 seconds' AND now() + $2::interval`,
		store.GraceHolder, j.Grace()))

	// The owner comes back within the grace and records its 250.
	res, err := b.sc.Store.FinishAttempts(context.Background(), []store.Attempt{{Fence: store.Fence{ID: late, Token: 1},
		Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp"}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	// The other one's grace runs out: now it is judged.
	b.sc.Exec(t, `UPDATE mail SET locked_until = now() - interval '1 second' WHERE id = $1`, silent)
	r, err = j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, r.Settled)
	b.waitRow(t, late, mailtype.StatusSent, 1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND ambiguous = 1`, silent))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
}

func TestJanitorRound(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	ids := make([]int64, 7)
	for i := range ids {
		ids[i] = b.insert(t, string(rune('a'+i)))
	}
	// 0: started, lease expired on the last attempt; 1: never started,
	// cancel requested; 2: sent long ago; 3: unknown long ago; 4: sent
	// recently; 5: pending; 6: never started, expired (the claim's).
	b.expire(t, ids[0], 5, 5, 0, true)
	b.expire(t, ids[1], 1, 0, 0, false)
	b.sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, ids[1])
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', updated_at = now() - interval '15 days' WHERE id = $1`, ids[2])
	b.sc.Exec(t, `UPDATE mail SET status = 'unknown', updated_at = now() - interval '15 days' WHERE id = $1`, ids[3])
	b.sc.Exec(t, `UPDATE mail SET status = 'sent' WHERE id = $1`, ids[4])
	b.expire(t, ids[6], 1, 0, 0, false)

	var woke atomic.Int32
	j, m := b.janitor(t, func(c *sender.JanitorConfig) { c.BatchSize = 1 }, func() { woke.Add(1) })
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, sender.Round{Settled: 2, Deleted: 1, Unknown: 2}, r)
	require.Equal(t, int32(2), woke.Load())

	// Item 5 of the fault issue: the last attempt ended ambiguous, so the
	// mail may have been delivered: unknown, never failed.
	b.waitRow(t, ids[0], mailtype.StatusUnknown, 5)
	b.waitRow(t, ids[1], mailtype.StatusCancelled, 1)
	b.waitRow(t, ids[6], mailtype.StatusSending, 1)
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE id = $1`, ids[2]))
	require.EqualValues(t, 6, b.count(t, `SELECT count(*) FROM mail`))
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailUnknown'
		AND payload->'data'->>'error_reason' = 'lease_expired' AND payload->'data'->>'attempts' = '5'`))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'
		AND payload->'data'->>'error_class' IS NULL AND payload->'data'->>'attempts' = '0'`),
		"a cancel that stopped a send before it started is a clean cancel")
	require.EqualValues(t, 1, value(m.Ambiguous.WithLabelValues("smtp", sender.NextUnknown)))

	again, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, sender.Round{Unknown: 2}, again)
}

// TestJanitorSettlesAStartedSendByThePolicy covers a crash after the mail
// was handed over, once its grace ran out: under retry the row goes back
// to pending within the ambiguity budget; past the budget, or under
// unknown, it ends unknown with EmailUnknown.
func TestJanitorSettlesAStartedSendByThePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	retry, spent := b.insert(t, "r"), b.insert(t, "s")
	b.expire(t, retry, 1, 1, 0, true)
	b.expire(t, spent, 2, 2, 1, true)
	j, m := b.janitor(t, nil, nil)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, r.Settled)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND attempts = 1
		AND ambiguous = 1 AND send_after > updated_at`, retry), "a resend waits out its backoff")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'unknown' AND ambiguous = 2`, spent))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, 1, value(m.Ambiguous.WithLabelValues("smtp", sender.NextRetry)))
	require.EqualValues(t, 1, value(m.Ambiguous.WithLabelValues("smtp", sender.NextUnknown)))

	unknown := b.insert(t, "u")
	b.expire(t, unknown, 1, 1, 0, true)
	ju, _ := b.janitor(t, func(c *sender.JanitorConfig) { c.Sender.AmbiguousPolicy = mailtype.PolicyUnknown }, nil)
	_, err = ju.RunOnce(context.Background())
	require.NoError(t, err)
	b.waitRow(t, unknown, mailtype.StatusUnknown, 1)
}

func TestJanitorLoopStartsAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "a")
	b.expire(t, id, 2, 5, 0, true)
	j, _ := b.janitor(t, func(c *sender.JanitorConfig) { c.Interval = 20 * time.Millisecond }, nil)
	require.NoError(t, j.Stop(context.Background()), "Stop without Start")
	j, _ = b.janitor(t, func(c *sender.JanitorConfig) { c.Interval = 20 * time.Millisecond }, nil)
	require.NoError(t, j.Start(context.Background()))
	b.waitRow(t, id, mailtype.StatusUnknown, 2)
	require.NoError(t, j.Stop(context.Background()))
	require.NoError(t, j.Stop(context.Background()))
	require.Error(t, j.Start(context.Background()))
}

// TestJanitorInterruptedSendOfACancelledMailIsUnknown is the SIGKILL case:
// a send took DATA and hung, the order was cancelled, the process died. The
// mail may have been delivered, so it ends unknown (one EmailUnknown), is
// never retried, and is not reported as attempts exhausted.
func TestJanitorInterruptedSendOfACancelledMailIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	b.expire(t, id, 1, 1, 0, true)
	b.sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, id)
	j, _ := b.janitor(t, nil, nil)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, r.Settled)

	b.waitRow(t, id, mailtype.StatusUnknown, 1)
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE last_error LIKE '%attempts_exhausted%'`))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = $1
		AND payload->'data'->>'error_class' = 'ambiguous' AND payload->'data'->>'error_reason' = 'lease_expired'`,
		string(mailtype.EmailUnknown)))
	require.Equal(t, map[string]string{"1": "EmailUnknown", "2": "EmailCancelTooLate"},
		b.sc.QueryMap(t, `SELECT (row_number() OVER (ORDER BY id))::text, event_type FROM outbox`),
		"one delivery outcome, then too late: it may have been delivered")

	again, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, again.Settled)
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM outbox`))
}
