package sender_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// TestRelayConnectionCapCostsNoAttempts: six workers against a relay that
// holds two sessions at once. The four refused workers must not spend the
// attempts of the mails they took: each goes back pending unspent and is
// sent by a worker that has a session, and a refused worker waits before
// it dials again instead of taking the next mail at once. Only the
// refusals that happen before the relay took any mail count as attempts,
// since nothing then shows that the relay is up: one per refused worker
// (workers - cap), since each then waits half a second or more.
func TestRelayConnectionCapCostsNoAttempts(t *testing.T) {
	t.Parallel()
	const mails, workers, limit = 60, 6, 2
	b, m := startAtCap(t, mails, workers, limit, sender.Deps{})

	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status <> 'pending' AND status <> 'sending'`) == mails
	}, 20*time.Second, 10*time.Millisecond)
	require.EqualValues(t, mails, b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`))
	require.Equal(t, mails, b.srv.Count(), "each mail delivered once")
	require.EqualValues(t, mails, b.events(t, "EmailSent"))
	spent := b.count(t, `SELECT coalesce(sum(sends - 1), 0) FROM mail`)
	t.Logf("refused connections %d, attempts spent on them %d", b.srv.Refused(), spent)
	require.LessOrEqual(t, spent, int64(workers-limit), "attempts spent on refused connections")
	require.Greater(t, b.srv.Refused(), int(spent), "no refusal at the cap: the test proves nothing")
	require.Equal(t, mails+int(spent), attempts(m, "smtp", sender.OutcomeSent)+attempts(m, "smtp", "transient"))
	require.EqualValues(t, spent, value(m.SessionsRefused.WithLabelValues("smtp", "false")), "refusals before any delivery")
	require.EqualValues(t, b.srv.Refused()-int(spent), value(m.SessionsRefused.WithLabelValues("smtp", "true")), "refusals at the cap")
	require.Zero(t, value(m.Throttled.WithLabelValues("smtp")))
}

// startAtCap starts a pool of workers (claims of 10, max_attempts 3) with
// mails pending, against a relay that holds limit sessions at once. Each
// message takes the relay 40 ms, so 60 mails through two sessions need
// about 1.2 s: the refused workers come back (after their first wait of at
// most a second) while mails are left, and meet the cap again.
func startAtCap(t *testing.T, mails, workers, limit int, deps sender.Deps) (*bundle, *sender.Metrics) {
	t.Helper()
	b := setup(t, smtptest.Options{MaxConnections: limit, DataDelay: 40 * time.Millisecond})
	for i := range mails {
		b.insert(t, fmt.Sprint(i))
	}
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize, cfg.MaxAttempts = workers, 10, 3
	_, m := b.start(t, cfg, deps)
	return b, m
}

// goDown takes the relay down: open sessions get atMail at MAIL FROM,
// every new one a 421 at the greeting, for the rest of the test; then n
// new mails are inserted and the pool woken.
func goDown(t *testing.T, b *bundle, p *sender.Pool, atMail smtptest.Fault, n int) {
	t.Helper()
	var mail, greet []smtptest.Fault
	for range 1000 {
		mail = append(mail, atMail)
		greet = append(greet, smtptest.Reply(421, "4.3.2 service not available"))
	}
	b.srv.Inject(smtptest.Mail, mail...)
	b.srv.Inject(smtptest.Greeting, greet...)
	for i := range n {
		b.insert(t, fmt.Sprint(100+i))
	}
	p.Wake()
}
