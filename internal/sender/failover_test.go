package sender_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// deadSMTP is an SMTP provider for an address where nothing listens.
func deadSMTP(t *testing.T) *smtp.Provider {
	t.Helper()
	host, port, err := net.SplitHostPort(sendertest.DeadAddr(t))
	require.NoError(t, err)
	n, _ := strconv.Atoi(port)
	prov, err := smtp.New(smtp.Config{Host: host, Port: n, TLS: smtp.TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	return prov
}

func failoverConfig() sender.Config {
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize = 1, 2
	cfg.BreakerThreshold, cfg.BreakerProbe = 3, time.Hour
	return cfg
}

// TestPrimaryDownEveryMailDeliveredOnceThroughTheFallback: the SMTP relay
// refuses every connection. The first three mails fail over within their
// attempt; the third failure opens the breaker and the rest go to Resend
// directly. Each mail is delivered once, with its own Message-ID, one
// attempt spent, and its EmailSent names resend.
func TestPrimaryDownEveryMailDeliveredOnceThroughTheFallback(t *testing.T) {
	t.Parallel()
	const mails = 10
	b := setup(t, smtptest.Options{})
	stand, fallback := resendAPI(t)
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	_, m := b.start(t, failoverConfig(), sender.Deps{Provider: deadSMTP(t), Fallback: fallback})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == mails
	}, 15*time.Second, 10*time.Millisecond)
	sent := stand.Sent()
	require.Len(t, sent, mails)
	seen := map[string]bool{}
	for _, s := range sent {
		require.False(t, seen[s.IdempotencyKey], "each mail once")
		seen[s.IdempotencyKey] = true
		orderID := s.IdempotencyKey[len("order-confirmed:"):]
		require.Equal(t, map[string]string{"Message-ID": mailtype.MessageID(key(orderID), "example.com")}, s.Headers,
			"the primary's Message-ID")
	}
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND provider = 'resend' AND sends = 1`))
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'
		AND payload->'data'->>'provider' = 'resend' AND payload->'data'->>'failover_from' = 'smtp'`),
		"the feedback names the provider that delivered, and the primary it replaced")
	for _, body := range b.sc.QueryMap(t, `SELECT event_id::text, payload::text FROM outbox`) {
		require.Empty(t, api.ValidateFeedback("EmailSent", []byte(body)), "the event validates against the contract")
	}
	require.EqualValues(t, 3, value(m.Failovers.WithLabelValues("smtp", "resend")), "three within their attempt, then the breaker routes")
	require.EqualValues(t, 3, value(m.Unspent.WithLabelValues("smtp", string(sender.TroubleConfig))), "the refused connections spent nothing")
	requireAttempts(t, m, "smtp", sender.OutcomeTransient, 0)
	requireAttempts(t, m, "resend", sender.OutcomeSent, mails)
	require.EqualValues(t, 1, gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))))
}

// TestPrimaryAmbiguousNeverFailsOver: the relay takes DATA and never
// answers. Under the unknown policy the mail ends unknown; under retry it
// is sent again through the same relay, within the ambiguity budget. The
// fallback never sees it.
func TestPrimaryAmbiguousNeverFailsOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy mailtype.AmbiguousPolicy
		copies int
	}{{mailtype.PolicyUnknown, 1}, {mailtype.PolicyRetry, 2}} {
		t.Run(string(c.policy), func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{LoseReplyFor: func(string) bool { return true }})
			stand, fallback := resendAPI(t)
			id := b.insert(t, "42")
			cfg := failoverConfig()
			cfg.SendTimeout = 300 * time.Millisecond
			cfg.AmbiguousPolicy = c.policy
			_, m := b.start(t, cfg, sender.Deps{Fallback: fallback})

			b.waitRow(t, id, mailtype.StatusUnknown, c.copies)
			require.Equal(t, c.copies, b.srv.Count())
			require.Empty(t, stand.Requests(), "never another provider after an ambiguous outcome")
			require.Zero(t, value(m.Failovers.WithLabelValues("smtp", "resend")))
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND provider = 'smtp'`, id))
		})
	}
}

// TestMailWithAnAmbiguousOutcomeWaitsForItsProvider: the primary's
// breaker is open and the fallback takes the other mails, but not one
// whose earlier send through the primary was ambiguous: the fallback could
// deliver it a second time. It waits, pending.
func TestMailWithAnAmbiguousOutcomeWaitsForItsProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	stand, fallback := resendAPI(t)
	amb := b.insert(t, "amb")
	b.sc.Exec(t, `UPDATE mail SET ambiguous = 1, sends = 1, provider = 'smtp' WHERE id = $1`, amb)
	for i := range 4 {
		b.insert(t, fmt.Sprint(i))
	}
	_, m := b.start(t, failoverConfig(), sender.Deps{Provider: deadSMTP(t), Fallback: fallback})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == 4
	}, 15*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))) == 1 },
		5*time.Second, 5*time.Millisecond)
	for _, r := range stand.Requests() {
		require.NotEqual(t, key("amb"), r.IdempotencyKey)
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND ambiguous = 1`, amb) == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
}

// TestQuotaFailsOver: Resend's daily quota is used up. The mail that met
// it goes through the SMTP fallback in the same attempt, the rest while
// Resend is paused; none spends more than its one attempt.
func TestQuotaFailsOver(t *testing.T) {
	t.Parallel()
	const mails = 5
	b := setup(t, smtptest.Options{})
	stand, primary := resendAPI(t)
	stand.Inject(resendtest.DailyQuota())
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := failoverConfig()
	cfg.QuotaProbe = time.Hour
	_, m := b.start(t, cfg, sender.Deps{Provider: primary, Fallback: b.smtpProvider(t, smtp.TLSNone)})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == mails
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, mails, b.srv.Count())
	require.Empty(t, stand.Sent())
	require.Len(t, stand.Requests(), 1, "Resend is paused after its quota answer")
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM mail WHERE provider = 'smtp' AND sends = 1`))
	require.EqualValues(t, 1, value(m.Failovers.WithLabelValues("resend", "smtp")))
	require.EqualValues(t, 1, value(m.Throttled.WithLabelValues("resend")))
	require.EqualValues(t, 1, gauge(m.Paused.WithLabelValues("resend", string(mailtype.PauseQuota))))
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM outbox WHERE payload->'data'->>'failover_from' = 'resend'`))
}
