package sender_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// outageConfig: two attempts only, so that any attempt an outage spent
// would fail or settle a mail, and probes fast enough for a test.
func outageConfig() sender.Config {
	cfg := testConfig()
	cfg.MaxAttempts = 2
	cfg.BreakerThreshold, cfg.BreakerProbe = 3, 200*time.Millisecond
	return cfg
}

// requireAllSentOnce waits until every mail is sent and checks that each
// spent exactly one attempt and nothing was failed or unknown.
func (b *bundle) requireAllSentOnce(t *testing.T, mails int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == int64(mails)
	}, 20*time.Second, 10*time.Millisecond, "%v", b.sc.QueryMap(t, `SELECT id::text, status || ' ' || sends FROM mail`))
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM mail WHERE sends = 1`), "one attempt spent per mail")
	require.EqualValues(t, mails, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 0, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
}

// TestResendDroppedConnectionsInsideTheKeyWindowSpendNothing: Resend's
// front drops every connection after reading the request (EOF), eight
// times per mail, with two attempts allowed. Every retry carries the same
// Idempotency-Key, which Resend honours for 24 h: each dropped request is
// sent again, unspent, and every mail ends sent once, never unknown.
func TestResendDroppedConnectionsInsideTheKeyWindowSpendNothing(t *testing.T) {
	t.Parallel()
	const mails, drops = 7, 8
	b := setup(t, smtptest.Options{})
	stand, prov := resendAPI(t)
	for range mails * drops {
		stand.Inject(resendtest.Drop())
	}
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	_, m := b.start(t, outageConfig(), sender.Deps{Provider: prov})

	b.requireAllSentOnce(t, mails)
	require.Len(t, stand.Sent(), mails)
	require.Len(t, stand.Requests(), mails*drops+mails)
	require.EqualValues(t, mails*drops, value(m.Unspent.WithLabelValues("resend", string(sender.TroubleOutage))))
	require.Equal(t, 0, attempts(m, "resend", sender.OutcomeAmbiguous)+attempts(m, "resend", sender.OutcomeTransient))
}

// TestResend5xxStormPausesResend: Resend answers 500 to twelve calls in a
// row. The third opens the breaker for the deployment, probes (one per
// 200 ms) meet the rest of the storm and then find it well again, and
// every mail is sent once: no attempt spent on the storm. (Thirty calls
// made the test last as long as the probes of a loaded machine allow.)
func TestResend5xxStormPausesResend(t *testing.T) {
	t.Parallel()
	const mails, storm = 5, 12
	b := setup(t, smtptest.Options{})
	stand, prov := resendAPI(t)
	for range storm {
		stand.Inject(resendtest.ServerError())
	}
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	_, m := b.start(t, outageConfig(), sender.Deps{Provider: prov})

	b.requireAllSentOnce(t, mails)
	require.Len(t, stand.Requests(), storm+mails)
	require.EqualValues(t, storm, value(m.Unspent.WithLabelValues("resend", string(sender.TroubleOutage))))
	require.GreaterOrEqual(t, value(m.OutageFailures.WithLabelValues("resend")), 3.0, "the failures before the breaker opened; probes are not counted")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM provider_state WHERE provider = 'resend'
		AND pause_reason IS NULL AND failures = 0 AND resumed_at IS NOT NULL`), "the breaker opened and a probe closed it")
}

// TestResend409InProgressIsRetriedUnspent: Resend's 409 resource_locked and
// concurrent_idempotent_requests say an earlier request with the key is
// still in progress: the mail is sent again after a short delay, spending
// nothing, and is delivered once.
func TestResend409InProgressIsRetriedUnspent(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	stand, prov := resendAPI(t)
	stand.Inject(resendtest.Error(409, "resource_locked"), resendtest.Error(409, "concurrent_idempotent_requests"))
	b.insert(t, "42")
	_, m := b.start(t, outageConfig(), sender.Deps{Provider: prov})

	b.requireAllSentOnce(t, 1)
	reqs := stand.Requests()
	require.Len(t, reqs, 3)
	require.GreaterOrEqual(t, reqs[1].At.Sub(reqs[0].At), 1500*time.Millisecond, "a short delay, not at once")
	require.EqualValues(t, 2, value(m.Unspent.WithLabelValues("resend", string(sender.TroubleInProgress))))
}

// TestSMTPThrottlingPausesTheRelayUnspent: Amazon SES's "454 Throttling
// failure" after DATA three times in a row. Each pauses the relay for
// every replica, for the delay the reply names; no attempt is spent and
// every mail is delivered once.
func TestSMTPThrottlingPausesTheRelayUnspent(t *testing.T) {
	t.Parallel()
	const mails = 4
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Data,
		smtptest.ReplyText(454, "Throttling failure: Maximum sending rate exceeded. Try again in 1 seconds"),
		smtptest.ReplyText(454, "Throttling failure: Maximum sending rate exceeded."),
		smtptest.ReplyText(421, "4.7.0 Temporary System Problem. Try again later"))
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := outageConfig()
	cfg.Workers = 1
	_, m := b.start(t, cfg, sender.Deps{})

	b.requireAllSentOnce(t, mails)
	require.Equal(t, mails, b.srv.Count())
	require.EqualValues(t, 3, value(m.Throttled.WithLabelValues("smtp")))
	require.Equal(t, 0, attempts(m, "smtp", sender.OutcomeTransient))
}

// TestGreylistedRecipientWaitsWithoutPausingTheRelay: a 450 4.2.0 to one
// recipient (Postgrey's greylisting) sends that mail back to pending for
// smtp.GreylistRetry; the relay is not paused and the other mail goes at
// once.
func TestGreylistedRecipientWaitsWithoutPausingTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.ReplyText(450, "4.2.0 <a@example.com>: Recipient address rejected: Greylisted"))
	first := b.insert(t, "1")
	cfg := outageConfig()
	cfg.Workers = 1
	_, m := b.start(t, cfg, sender.Deps{})
	// A claim can be released unspent before its send (the pool's first
	// read of the providers' state): wait for the greylisting itself.
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND sends = 1`, first) == 1
	}, 10*time.Second, 5*time.Millisecond)
	second := b.insert(t, "2")
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND sends = 1`, second) == 1
	}, 10*time.Second, 5*time.Millisecond)

	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND sends = 1
		AND send_after > now() + interval '4 minutes' AND last_error LIKE 'deferred: smtp rcpt to: 450 %Greylisted%'`, first),
		"%v", b.sc.QueryMap(t, `SELECT id::text, sends || ' ' || (send_after - now())::text || ' ' || COALESCE(last_error, '') FROM mail`))
	require.EqualValues(t, 0, value(m.Throttled.WithLabelValues("smtp")))
	require.EqualValues(t, 0, gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseRateLimited))))
	require.Equal(t, 1, b.srv.Count())
}

// TestRelayRestartResumesWithinSeconds: the relay refuses connections for
// a few seconds (a restart). The breaker opens after three refusals and
// probes 0.2 s later, then at doubling intervals: the mails flow again
// within seconds of the relay's return, none spent an attempt.
func TestRelayRestartResumesWithinSeconds(t *testing.T) {
	t.Parallel()
	const mails = 5
	b := setup(t, smtptest.Options{})
	px := testproxy.New(t, net.JoinHostPort(b.srv.Host, strconv.Itoa(b.srv.Port)))
	host, port, err := net.SplitHostPort(px.Addr)
	require.NoError(t, err)
	n, _ := strconv.Atoi(port)
	prov, err := smtp.New(smtp.Config{Host: host, Port: n, TLS: smtp.TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	px.Cut()
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := outageConfig()
	cfg.BreakerProbe = 30 * time.Second // the default: the probes double from 1 s
	_, m := b.start(t, cfg, sender.Deps{Provider: prov})
	require.Eventually(t, func() bool { return gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))) == 1 },
		10*time.Second, 5*time.Millisecond)
	// Two probes fail while the relay is down (1 s and 2 s after the
	// breaker opened); the next one is due 2 s after the second.
	require.Eventually(t, func() bool {
		return value(m.Unspent.WithLabelValues("smtp", string(sender.TroubleConfig))) >= 5
	}, 10*time.Second, 5*time.Millisecond)
	px.Restore(t)
	back := time.Now()

	b.requireAllSentOnce(t, mails)
	lag := time.Since(back)
	t.Logf("all %d mails sent %s after the relay came back", mails, lag.Round(time.Millisecond))
	require.Less(t, lag, 10*time.Second, "the probe after a short outage comes within seconds, not breaker_probe_interval")
}
