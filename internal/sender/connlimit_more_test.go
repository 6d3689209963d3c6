package sender_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

const capWarning = "the provider refused a new session while others deliver (is sender.workers above its limit of " +
	"connections per client?); the mail goes back unspent and this worker waits before it dials again"

// TestCapWarningIsLogged: the documented scenario of
// TestRelayConnectionCapCostsNoAttempts (6 workers, cap 2, fresh start).
// Refusals at the cap happen (the metric counts them), so the promised
// "one warning per refusal streak" must show at least once, and at most
// once per refused worker.
func TestCapWarningIsLogged(t *testing.T) {
	t.Parallel()
	const mails, workers, limit = 60, 6, 2
	var logs logLines
	b, m := startAtCap(t, mails, workers, limit, sender.Deps{Log: logs.logger()})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == mails
	}, 20*time.Second, 10*time.Millisecond)
	atCap := value(m.SessionsRefused.WithLabelValues("smtp", "true"))
	require.NotZero(t, atCap, "no refusal at the cap: the test proves nothing")
	warned := len(logs.records(t, capWarning))
	t.Logf("refusals at the cap %v, before a delivery %v, warnings %d", atCap,
		value(m.SessionsRefused.WithLabelValues("smtp", "false")), warned)
	require.NotZero(t, warned, "refusals at the cap, yet no warning in the log")
	require.LessOrEqual(t, warned, workers-limit, "one warning per refusal streak")
}

// TestCapWithFallbackRefusedWorkerWaits: the primary relay holds one
// session at a time, a fallback (Resend) is configured. At the cap the
// refused worker is promised to wait (1 s doubling) and the mail to go
// back unspent; only the refusals before the first delivery are ordinary
// failures (which may fail over: at most workers - cap of them).
func TestCapWithFallbackRefusedWorkerWaits(t *testing.T) {
	t.Parallel()
	const mails, workers, limit = 40, 4, 1
	stand, fallback := resendAPI(t)
	b, m := startAtCap(t, mails, workers, limit, sender.Deps{Fallback: fallback})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == mails
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, mails, b.srv.Count()+len(stand.Sent()), "each mail delivered once")
	t.Logf("relay %d, fallback %d, refused %d (at cap %v), failovers %v", b.srv.Count(), len(stand.Sent()), b.srv.Refused(),
		value(m.SessionsRefused.WithLabelValues("smtp", "true")), value(m.Failovers.WithLabelValues("smtp", "resend")))
	require.LessOrEqual(t, len(stand.Sent()), workers-limit,
		"mails refused at the relay's cap (while it delivers) went to the fallback instead of back to pending; the refused worker never waited")
}

// TestStopWhileWorkersWaitToDial: workers sit in their dial wait (cap 1,
// 3 workers, refusals at the cap counted) when Stop comes: it returns
// promptly and leaves no row in sending, nothing lost or doubled.
func TestStopWhileWorkersWaitToDial(t *testing.T) {
	t.Parallel()
	const mails = 30
	b := setup(t, smtptest.Options{MaxConnections: 1, DataDelay: 100 * time.Millisecond})
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = 3, 10, 5
	m := sender.NewMetrics(nil)
	p, err := sender.New(cfg, sender.Deps{Store: b.sc.Store, Provider: b.smtpProvider(t, "none"), Metrics: m})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	require.Eventually(t, func() bool { return value(m.SessionsRefused.WithLabelValues("smtp", "true")) >= 2 },
		15*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, p.Stop(ctx))
	took := time.Since(start)
	t.Logf("Stop took %v", took)
	require.Less(t, took, 2*time.Second, "Stop waited out a dial wait")
	require.Zero(t, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sending'`))
	sent := b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`)
	require.EqualValues(t, b.srv.Count(), sent, "each delivered mail recorded sent, once")
	require.EqualValues(t, mails-sent, b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending'`))
	require.EqualValues(t, sent, b.events(t, mailtype.EmailSent))
}

// TestRelayDownAfterDeliveriesEndsFailed: the relay delivers, then goes
// down: open sessions get 421 at MAIL FROM, every new one 421 at the
// greeting. Each failed send ends its session's liveness, so once no
// session is live the refusals are no longer the cap: they spend
// attempts, and max_attempts ends every new mail failed (nothing loops
// unspent, nothing is stuck in sending).
func TestRelayDownAfterDeliveriesEndsFailed(t *testing.T) {
	t.Parallel()
	const warm, down, workers = 4, 4, 4
	b := setup(t, smtptest.Options{})
	for i := range warm {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = workers, 4, 2
	p, m := b.start(t, cfg, sender.Deps{})
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == warm
	}, 15*time.Second, 10*time.Millisecond)
	downAt := time.Now()
	goDown(t, b, p, smtptest.Reply(421, "4.3.2 service shutting down"), down)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'failed'`) == down
	}, 30*time.Second, 10*time.Millisecond)
	t.Logf("all failed after %v; refused at cap %v, not %v", time.Since(downAt),
		value(m.SessionsRefused.WithLabelValues("smtp", "true")), value(m.SessionsRefused.WithLabelValues("smtp", "false")))
	require.Equal(t, warm, b.srv.Count())
	require.EqualValues(t, down, b.count(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND sends = 2`))
	require.EqualValues(t, down, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, warm, b.events(t, mailtype.EmailSent))
	require.Zero(t, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sending'`))
}

// TestCapWithOtherFaults: the cap (6 workers, 2 sessions) together with
// one 451 at DATA and a recipient whose reply is always lost after DATA
// (ambiguous). Exact outcomes: the 451 mail sent, the silent one unknown
// after its one resend, everything else sent once; events match.
func TestCapWithOtherFaults(t *testing.T) {
	t.Parallel()
	const mails, workers, limit = 30, 6, 2
	silent := "customer-7@example.com"
	b := setup(t, smtptest.Options{MaxConnections: limit, DataDelay: 40 * time.Millisecond,
		LoseReplyFor: func(rcpt string) bool { return rcpt == silent }})
	b.srv.Inject(smtptest.Data, smtptest.Reply(451, "4.3.0 try again"))
	for i := range mails - 1 {
		b.insert(t, fmt.Sprint(i))
	}
	_, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: "silent", ToEmail: silent})
	require.NoError(t, err)
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = workers, 10, 5
	cfg.SendTimeout = 500 * time.Millisecond
	_, m := b.start(t, cfg, sender.Deps{})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status <> 'pending' AND status <> 'sending'`) == mails
	}, 30*time.Second, 10*time.Millisecond)
	require.EqualValues(t, mails-1, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE status = 'unknown' AND to_email = $1 AND ambiguous = 2 AND sends = 2`, silent))
	require.EqualValues(t, mails-1, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, mails+1, b.srv.Count(), "each mail taken once, the silent one twice")
	spentOnRefusals := b.count(t, `SELECT coalesce(sum(sends - 1), 0) FROM mail WHERE to_email <> $1`, silent) - 1 // one 451
	require.GreaterOrEqual(t, spentOnRefusals, int64(0))
	require.LessOrEqual(t, spentOnRefusals, int64(workers-limit))
	require.EqualValues(t, spentOnRefusals, value(m.SessionsRefused.WithLabelValues("smtp", "false")))
	require.EqualValues(t, b.srv.Refused()-int(spentOnRefusals), value(m.SessionsRefused.WithLabelValues("smtp", "true")))
}

// TestIdleSessionStillMarksTheCap: one worker holds the relay's only
// session, delivered through it and is now idle (a quiet hour: nothing
// closes it). When two mails come at once, the second worker is refused
// by the cap. The idle session is live, so that refusal is the cap: the
// mail goes back unspent and is sent, with max_attempts 1, none failed.
func TestIdleSessionStillMarksTheCap(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{MaxConnections: 1, DataDelay: 200 * time.Millisecond})
	first := b.insert(t, "0")
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = 2, 2, 1
	cfg.Lease, cfg.SendTimeout = 10*time.Second, 2*time.Second
	p, m := b.start(t, cfg, sender.Deps{})
	b.waitRow(t, first, mailtype.StatusSent, 1)
	require.Zero(t, b.srv.Refused(), "one mail, one session")

	b.insert(t, "1")
	b.insert(t, "2")
	p.Wake()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status <> 'pending' AND status <> 'sending'`) == 3
	}, 20*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 3, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND sends = 1`))
	require.Equal(t, 3, b.srv.Count())
	require.EqualValues(t, b.srv.Refused(), value(m.SessionsRefused.WithLabelValues("smtp", "true")))
	require.Zero(t, value(m.SessionsRefused.WithLabelValues("smtp", "false")))
}

// TestReconnectRefusedByItsOwnClosingConnection: one worker, a relay that
// holds one session per client (workers within the cap). The relay ends
// the worker's reused connection with a 421 at MAIL FROM (a limit of
// messages per connection, RFC 5321 4.2.2); Send redials at once within
// the same call (deadBeforeTransaction), while the relay may still count
// the old connection: the redial meets the cap (421 at the greeting). The
// session that fills the cap is the worker's own, live a moment ago: that
// is the cap, so the mail goes back unspent (max_attempts 1: not failed).
// Whether the relay still counts the old connection at the redial is a
// race (about half the runs); the counts hold either way.
func TestReconnectRefusedByItsOwnClosingConnection(t *testing.T) {
	b := setup(t, smtptest.Options{MaxConnections: 1})
	first := b.insert(t, "0")
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = 1, 1, 1
	p, m := b.start(t, cfg, sender.Deps{})
	b.waitRow(t, first, mailtype.StatusSent, 1)
	b.srv.Inject(smtptest.Mail, smtptest.Reply(421, "4.7.0 too many messages on this connection"))
	b.insert(t, "1")
	p.Wake()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status <> 'pending' AND status <> 'sending'`) == 2
	}, 20*time.Second, 10*time.Millisecond)
	t.Logf("refused %d, at cap %v, not %v", b.srv.Refused(),
		value(m.SessionsRefused.WithLabelValues("smtp", "true")), value(m.SessionsRefused.WithLabelValues("smtp", "false")))
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND sends = 1`),
		"a reconnect refused because the relay still counted the worker's own old connection cost the mail its only attempt")
	require.Equal(t, 2, b.srv.Count())
}

// scriptedProvider's sessions answer each send with the next error of
// errs (nil: accepted), then with last forever.
type scriptedProvider struct {
	mu   sync.Mutex
	errs []error
	last error
	n    int
}

func (p *scriptedProvider) Name() string                     { return "smtp" }
func (p *scriptedProvider) IdempotencyWindow() time.Duration { return 0 }
func (p *scriptedProvider) NewSession() sender.Session       { return scriptedSession{p} }

type scriptedSession struct{ p *scriptedProvider }

func (s scriptedSession) Send(context.Context, *sender.Message) (sender.Receipt, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.n++
	if len(s.p.errs) > 0 {
		err := s.p.errs[0]
		s.p.errs = s.p.errs[1:]
		return sender.Receipt{}, err
	}
	return sender.Receipt{}, s.p.last
}

func (s scriptedSession) Close() error { return nil }

func busyErr() error {
	return &sender.ProviderError{Trouble: sender.TroubleBusy,
		Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonConnect, errors.New("greeting: 421 4.3.2 service not available"))}
}

func configErr() error {
	return &sender.ProviderError{Trouble: sender.TroubleConfig,
		Err: mailtype.NewError(mailtype.Transient, mailtype.ReasonConnect, errors.New("connect: connection refused"))}
}

// TestProbeRefusedWithNoLiveSessionIsNoCapWarning: one worker, the relay
// refuses connections (the breaker opens after 3), then answers every
// probe with a 421 greeting. No session is live at any time
// (at_cap="false" only): the probe's unspent verdict must not log the cap
// warning, which would point the operator at sender.workers for a relay
// that is down.
func TestProbeRefusedWithNoLiveSessionIsNoCapWarning(t *testing.T) {
	b := setup(t, smtptest.Options{})
	for i := range 4 {
		b.insert(t, fmt.Sprint(i))
	}
	prov := &scriptedProvider{errs: []error{configErr(), configErr(), configErr()}, last: busyErr()}
	var logs logLines
	_, m := b.start(t, breakerConfig(), sender.Deps{Provider: prov, Log: logs.logger()})
	// The one worker is sequential: its second probe refusal is counted
	// only after the first one's waitToDial logged (or not).
	require.Eventually(t, func() bool { return value(m.SessionsRefused.WithLabelValues("smtp", "false")) >= 2 },
		15*time.Second, 5*time.Millisecond)
	require.Zero(t, value(m.SessionsRefused.WithLabelValues("smtp", "true")), "no session was ever live")
	require.Len(t, logs.records(t, capWarning), 0, "the cap warning for a probe refused by a relay that has no session of ours")
}

// TestRelayDropsIdleThenRefusesAllEndsFailed: 6 workers deliver (most of
// them end live), then the relay drops every reused connection at MAIL
// FROM and refuses every new one with 421 at the greeting. Every live
// session's next send ends its liveness, so the refusals stop being the
// cap and max_attempts ends the new mails failed.
func TestRelayDropsIdleThenRefusesAllEndsFailed(t *testing.T) {
	const warm, down, workers = 24, 6, 6
	b := setup(t, smtptest.Options{DataDelay: 20 * time.Millisecond})
	for i := range warm {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = workers, 6, 2
	cfg.Lease, cfg.SendTimeout = 10*time.Second, 2*time.Second
	p, m := b.start(t, cfg, sender.Deps{})
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == warm
	}, 15*time.Second, 10*time.Millisecond)
	goDown(t, b, p, smtptest.Drop(), down)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'failed'`) == down
	}, 60*time.Second, 10*time.Millisecond)
	t.Logf("refused at cap %v, not %v", value(m.SessionsRefused.WithLabelValues("smtp", "true")), value(m.SessionsRefused.WithLabelValues("smtp", "false")))
	require.Equal(t, warm, b.srv.Count())
	require.EqualValues(t, down, b.count(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND sends = 2`))
	require.EqualValues(t, down, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, warm, b.events(t, mailtype.EmailSent))
	require.Zero(t, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sending'`))
}
