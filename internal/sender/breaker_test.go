package sender_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// countingProvider counts and times the calls of its sessions.
type countingProvider struct {
	sender.Provider
	mu    sync.Mutex
	calls []time.Time
}

func (c *countingProvider) NewSession() sender.Session {
	return &countingSession{Session: c.Provider.NewSession(), p: c}
}

func (c *countingProvider) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.calls...)
}

type countingSession struct {
	sender.Session
	p *countingProvider
}

func (s *countingSession) Send(ctx context.Context, m *sender.Message) (sender.Receipt, error) {
	s.p.mu.Lock()
	s.p.calls = append(s.p.calls, time.Now())
	s.p.mu.Unlock()
	return s.Session.Send(ctx, m)
}

// breakerConfig: one worker, so the count of failures before the trip is
// exact, and a short probe interval.
func breakerConfig() sender.Config {
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize = 1, 2
	cfg.BreakerThreshold, cfg.BreakerProbe = 3, 300*time.Millisecond
	cfg.MaxAttempts = 4
	return cfg
}

const breakerMails = 8

// requireBreakerOpens runs the pool on prov against 8 mails whose every
// send fails the same way, and checks what the breaker does: after exactly
// three failures (no attempt spent on any: the trouble is the provider's)
// the provider is paused for every worker, the alert metric is up, and
// only one probe per interval reaches the provider, spending nothing; no
// mail fails.
func requireBreakerOpens(t *testing.T, b *bundle, prov sender.Provider, reason mailtype.Reason) (*countingProvider, *sender.Metrics) {
	t.Helper()
	for i := range breakerMails {
		b.insert(t, fmt.Sprint(i))
	}
	cp := &countingProvider{Provider: prov}
	_, m := b.start(t, breakerConfig(), sender.Deps{Provider: cp})

	require.Eventually(t, func() bool { return len(cp.times()) >= 6 }, 15*time.Second, 5*time.Millisecond,
		"three failures, then probes")
	calls := cp.times()
	// Each probe's send starts when its mark committed, which a loaded
	// machine delays by up to a hundred milliseconds or so: the probes are
	// 300 ms apart on average, not each.
	require.GreaterOrEqual(t, calls[5].Sub(calls[2]), 3*200*time.Millisecond,
		"calls 3 to 5: one probe per sender.breaker_probe_interval")
	require.EqualValues(t, 3, value(m.ConfigFailures.WithLabelValues("smtp")), "three in a row opened it")
	require.EqualValues(t, 1, gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM provider_state WHERE provider = 'smtp'
		AND pause_reason = 'breaker' AND failures = 3 AND pause_error LIKE $1`, string(reason)+" %"),
		"%v", b.sc.QueryMap(t, `SELECT provider, COALESCE(pause_reason || ' ' || failures || ' ' || pause_error, '') FROM provider_state`))
	// A probe in flight has its send counted until its outcome undoes it.
	require.Eventually(t, func() bool { return b.count(t, `SELECT sum(sends) FROM mail WHERE status = 'pending'`) == 0 },
		5*time.Second, time.Millisecond, "neither the failures nor the probes spend an attempt")
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE status NOT IN ('pending', 'sending')`), "no mail fails")
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM outbox`))
	return cp, m
}

func TestBreakerOpensOnRefusedCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{STARTTLS: true, Username: "mailer", Password: "right"})
	prov, err := smtp.New(smtp.Config{Host: b.srv.Host, Port: b.srv.Port, TLS: smtp.TLSStartTLS, TLSConfig: b.srv.ClientTLSConfig(),
		Username: "mailer", Password: "wrong", HELO: "test.local"})
	require.NoError(t, err)
	cp, m := requireBreakerOpens(t, b, prov, mailtype.ReasonAuth)
	// A probe counted as it starts reaches AUTH a moment later: wait for
	// the server to have seen every call counted so far.
	require.Eventually(t, func() bool { return len(cp.times()) == b.srv.Auths() }, 5*time.Second, time.Millisecond,
		"every call was refused at AUTH")
	require.Zero(t, b.srv.MailCommands())

	// The operator fixes the credentials (here: the relay accepts the old
	// ones): the next probe succeeds and closes the breaker.
	b.srv.SetPassword("wrong")
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == breakerMails
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, breakerMails, b.srv.Count(), "each mail once")
	require.EqualValues(t, breakerMails, b.count(t, `SELECT sum(sends) FROM mail`), "one send per mail; the failures spent none")
	require.EqualValues(t, breakerMails, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
	require.Eventually(t, func() bool { return gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))) == 0 },
		5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM provider_state WHERE provider = 'smtp' AND pause_reason IS NULL AND failures = 0`))
}

func TestBreakerOpensWhenStartTLSIsNotOffered(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	requireBreakerOpens(t, b, b.smtpProvider(t, smtp.TLSStartTLS), mailtype.ReasonTLS)
	require.Zero(t, b.srv.MailCommands(), "never plaintext")
}

func TestBreakerOpensWhenTheCertificateDoesNotVerify(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{STARTTLS: true})
	prov, err := smtp.New(smtp.Config{Host: b.srv.Host, Port: b.srv.Port, TLS: smtp.TLSStartTLS, HELO: "test.local"}) // the system roots
	require.NoError(t, err)
	requireBreakerOpens(t, b, prov, mailtype.ReasonTLS)
	require.Zero(t, b.srv.MailCommands())
}

func TestBreakerOpensWhenEveryConnectionIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	host, port, err := net.SplitHostPort(sendertest.DeadAddr(t))
	require.NoError(t, err)
	n, _ := strconv.Atoi(port)
	prov, err := smtp.New(smtp.Config{Host: host, Port: n, TLS: smtp.TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	requireBreakerOpens(t, b, prov, mailtype.ReasonConnect)
}

// TestBadRecipientNeverTripsTheBreaker: with a threshold of one, a 550
// 5.1.1 for one recipient fails that mail and nothing else: the refusal is
// about the mail, and it proves the configuration works.
func TestBadRecipientNeverTripsTheBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.ReplyText(550, "5.1.1 no such user"))
	bad := b.insert(t, "bad")
	var ids []int64
	for i := range 3 {
		ids = append(ids, b.insert(t, fmt.Sprint(i)))
	}
	cfg := breakerConfig()
	cfg.BreakerThreshold = 1
	_, m := b.start(t, cfg, sender.Deps{})
	b.waitRow(t, bad, mailtype.StatusFailed, 1)
	for _, id := range ids {
		b.waitRow(t, id, mailtype.StatusSent, 1)
	}
	require.Zero(t, value(m.ConfigFailures.WithLabelValues("smtp")))
	require.Zero(t, gauge(m.Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM provider_state WHERE provider = 'smtp' AND pause_reason IS NULL AND failures = 0`))
}

// TestBreakerIsSharedByReplicas: failures on two replicas add up; once
// open, neither sends anything but the probes.
func TestBreakerIsSharedByReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	for i := range breakerMails {
		b.insert(t, fmt.Sprint(i))
	}
	cp := &countingProvider{Provider: b.smtpProvider(t, smtp.TLSStartTLS)}
	cfg := breakerConfig()
	cfg.BreakerProbe = time.Hour
	ms := b.replicas(t, 2, cfg, sender.Deps{Provider: cp})
	require.Eventually(t, func() bool {
		return gauge(ms[0].Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))) == 1 &&
			gauge(ms[1].Paused.WithLabelValues("smtp", string(mailtype.PauseBreaker))) == 1
	}, 10*time.Second, 5*time.Millisecond)
	// Sends already past their route when the breaker opened finish; then
	// every call is recorded as unspent.
	unspent := func() int {
		return int(value(ms[0].Unspent.WithLabelValues("smtp", string(sender.TroubleConfig))) +
			value(ms[1].Unspent.WithLabelValues("smtp", string(sender.TroubleConfig))))
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sending' AND send_started_at IS NOT NULL`) == 0 &&
			unspent() == len(cp.times())
	}, 10*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 0, b.count(t, `SELECT sum(sends) FROM mail`), "a refused connection spends no attempt")
	opened := len(cp.times())
	require.GreaterOrEqual(t, opened, 3)
	require.LessOrEqual(t, opened, 4, "at most the other replica's send in flight after the third failure")
	require.EqualValues(t, opened, value(ms[0].ConfigFailures.WithLabelValues("smtp"))+value(ms[1].ConfigFailures.WithLabelValues("smtp")))
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE status NOT IN ('pending', 'sending')`))
}

// TestBreakerOpensOnARefusedAPIKey: Resend answers 401 to every call (a
// wrong resend.api_key). After three the breaker opens; once the key is
// right, the next probe resumes sending and every mail goes once.
func TestBreakerOpensOnARefusedAPIKey(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	stand, prov := resendAPI(t)
	stand.SetAPIKey("re_other")
	for i := range breakerMails {
		b.insert(t, fmt.Sprint(i))
	}
	_, m := b.start(t, breakerConfig(), sender.Deps{Provider: prov})
	require.Eventually(t, func() bool { return gauge(m.Paused.WithLabelValues("resend", string(mailtype.PauseBreaker))) == 1 },
		10*time.Second, 5*time.Millisecond)
	// Three failures opened it; a probe (every 300 ms) may have failed too
	// by the time the gauge is read on a loaded machine. That exactly three
	// attempts were spent is checked at the end (sum of sends).
	require.GreaterOrEqual(t, value(m.ConfigFailures.WithLabelValues("resend")), 3.0)
	require.Eventually(t, func() bool { return len(stand.Requests()) >= 5 }, 10*time.Second, 5*time.Millisecond, "probes")
	for _, r := range stand.Requests() {
		require.Equal(t, 401, r.Status)
	}
	stand.SetAPIKey(apiKey)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == breakerMails
	}, 15*time.Second, 10*time.Millisecond)
	require.Len(t, stand.Sent(), breakerMails)
	require.EqualValues(t, breakerMails, b.count(t, `SELECT sum(sends) FROM mail`), "a refused key spends no attempt")
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
}
