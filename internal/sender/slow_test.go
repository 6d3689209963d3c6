package sender_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// slowConfig judges the relay slow once the p90 of its last four sends
// passes 200ms (the slow test relay answers after 400ms; a fast one
// within milliseconds, well under the 160ms that lift the guard), with
// four workers and two sends at once while it is slow.
func slowConfig() sender.Config {
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize = 4, 8
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 10*time.Second
	cfg.SlowSendThreshold, cfg.SlowSendWindow, cfg.SlowSendConcurrency = 200*time.Millisecond, 4, 2
	return cfg
}

// slowDelay is how late the slow relay answers DATA.
const slowDelay = 400 * time.Millisecond

// insertMany inserts mails for the order ids prefix0 … prefix(n-1).
func (b *bundle) insertMany(t *testing.T, prefix string, n int) {
	t.Helper()
	for i := range n {
		b.insert(t, fmt.Sprint(prefix, i))
	}
}

// TestSlowPrimaryHandsProvablyUnsentMailsToTheFallback: the relay
// answers, 400ms late. After four slow sends the guard engages: the relay
// keeps one send at a time (held at the server here) and the fallback
// takes the other new mails; a mail with an ambiguous outcome at the relay
// stays on it. When the relay is fast again, a few sends through it lift
// the guard and every mail goes to it again. Each mail is delivered once.
func TestSlowPrimaryHandsProvablyUnsentMailsToTheFallback(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{DataDelay: slowDelay})
	stand, fallback := resendAPI(t)
	b.insertMany(t, "slow", 4)
	_, m := b.start(t, slowConfig(), sender.Deps{Fallback: fallback})
	b.waitSent(t, 4)
	require.Eventually(t, func() bool { return gauge(m.Slow.WithLabelValues("smtp")) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, gauge(m.SendP90.WithLabelValues("smtp")), slowDelay.Seconds())

	release := make(chan struct{})
	b.srv.Inject(smtptest.Data, smtptest.Hold(release, smtptest.Accept()))
	b.insertMany(t, "new", 10)
	require.Eventually(t, func() bool { return len(stand.Sent()) == 9 && b.srv.Delaying() == 1 }, 10*time.Second, 5*time.Millisecond,
		"one new mail held at the slow relay, nine through the fallback")

	amb, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: "amb", SendAfter: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	b.sc.Exec(t, `UPDATE mail SET ambiguous = 1, sends = 1, provider = 'smtp', send_after = now() WHERE id = $1`, amb)
	b.waitSent(t, 4+9+1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND provider = 'smtp' AND sends = 2`, amb),
		"the mail with an ambiguous outcome went to its own provider, slow as it is")
	for _, r := range stand.Requests() {
		require.NotEqual(t, key("amb"), r.IdempotencyKey)
	}
	require.Equal(t, 5, b.srv.Count(), "four before the guard, the ambiguous one; one held")

	b.srv.SetDataDelay(0)
	close(release)
	b.waitSent(t, 4+10+1)
	sent := int64(15)
	for i := 0; gauge(m.Slow.WithLabelValues("smtp")) == 1; i++ {
		require.Less(t, i, 20, "the fast relay never lifted the guard")
		b.insert(t, fmt.Sprint("fast", i)) // one at a time: each is the relay's one send
		sent++
		b.waitSent(t, sent)
	}
	require.Len(t, stand.Sent(), 9, "the guard lifting sends nothing to the fallback")

	b.insertMany(t, "back", 8)
	b.waitSent(t, sent+8)
	require.Len(t, stand.Sent(), 9, "the relay is fast: every mail goes to it again")
	require.EqualValues(t, sent+8-9, b.srv.Count())
	require.EqualValues(t, sent+8, int64(b.srv.Count()+len(stand.Sent())), "each mail delivered once")
	require.EqualValues(t, 9, b.count(t, `SELECT count(*) FROM mail WHERE provider = 'resend' AND sends = 1`))
	require.EqualValues(t, 9, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'
		AND payload->'data'->>'provider' = 'resend' AND payload->'data'->>'failover_from' = 'smtp'`))
	require.EqualValues(t, 9, value(m.SlowReroutes.WithLabelValues("smtp", "resend")))
	require.Zero(t, value(m.Failovers.WithLabelValues("smtp", "resend")), "no send failed over within its attempt")
	require.Zero(t, gauge(m.Slow.WithLabelValues("resend")))
}

// TestSlowRelayWithoutFallbackKeepsToItsConcurrency: with no fallback,
// the slow relay gets at most sender.slow_send_concurrency sends at once
// (two of four workers), as the relay itself counts them; every mail
// is still sent once.
func TestSlowRelayWithoutFallbackKeepsToItsConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{DataDelay: slowDelay})
	b.insertMany(t, "slow", 4)
	_, m := b.start(t, slowConfig(), sender.Deps{})
	b.waitSent(t, 4)
	require.Equal(t, 4, b.srv.PeakData(), "four sends at once before the guard")
	require.Eventually(t, func() bool { return gauge(m.Slow.WithLabelValues("smtp")) == 1 }, 5*time.Second, 5*time.Millisecond)

	b.srv.ResetPeak()
	b.insertMany(t, "more", 8)
	b.waitSent(t, 12)
	require.Equal(t, 2, b.srv.PeakData(), "two sends at once while slow")
	require.Equal(t, 12, b.srv.Count())
	require.EqualValues(t, 12, b.count(t, `SELECT count(*) FROM mail WHERE sends = 1 AND provider = 'smtp'`))
	require.EqualValues(t, 1, gauge(m.Slow.WithLabelValues("smtp")))
	require.GreaterOrEqual(t, gauge(m.SendP90.WithLabelValues("smtp")), slowDelay.Seconds())
	requireAttempts(t, m, "smtp", sender.OutcomeSent, 12)
}
