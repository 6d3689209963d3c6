package e2e

import (
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// The provider chaos: two replicas against a provider that fails for
// minutes, while orders keep coming. What the issue of outages asks is
// counted and asserted: no attempt spent on the outage or the throttling,
// no Resend mail unknown inside its key window, no mail failed that was
// fresh when its provider came back.
const (
	outageOrders   = 240
	outagePublish  = 150 * time.Second
	outageStart    = 20 * time.Second
	outageLength   = 120 * time.Second
	outageMaxAge   = 60 * time.Second
	throttleOrders = 150
	throttleStorm  = 25
)

// TestProviderChaos runs the Resend outage and the SMTP throttling storm
// side by side.
func TestProviderChaos(t *testing.T) {
	t.Parallel()
	t.Run("resend outage", testResendOutage)
	t.Run("smtp throttling storm", testThrottlingStorm)
}

// testResendOutage: Resend answers nothing for two minutes (dropped
// connections, 500s, 503s, responses lost after the mail was sent) while
// orders keep coming, with mail.max_event_age 60 s and three attempts per
// mail.
func testResendOutage(t *testing.T) {
	t.Parallel()
	stand := resendtest.New(t, "re_chaos")
	s := e2etest.NewStack(t, "127.0.0.1:25")
	for k, v := range map[string]string{
		"MAILSVC_SENDER_PROVIDER":     "resend",
		"MAILSVC_RESEND_API_KEY":      "re_chaos",
		"MAILSVC_RESEND_BASE_URL":     stand.URL,
		"MAILSVC_SENDER_MAX_ATTEMPTS": "3",
		"MAILSVC_MAIL_MAX_EVENT_AGE":  outageMaxAge.String(),
	} {
		s.Env[k] = v
	}
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	s.Serve(nil)
	s.Serve(nil)
	events := make([]e2etest.OrderEvent, 0, outageOrders)
	for i := 1; i <= outageOrders; i++ {
		events = append(events, e2etest.Confirmed(i, "en"))
	}
	r := &chaosRig{t: t, s: s}
	started := time.Now()
	published := r.publishPacedFresh(events, outagePublish)
	time.Sleep(outageStart) // the outage's timeline, not a synchronisation
	stand.Down(resendtest.Drop(), resendtest.ServerError(), resendtest.Error(503, "service_unavailable"), resendtest.LoseResponse())
	down := time.Now()
	time.Sleep(outageLength) // Resend stays down this long, whatever mailsvc does
	failed := stand.Up()
	up := time.Now()
	require.NoError(t, <-published)
	t.Logf("Resend down from %s to %s after the start; %d requests failed", down.Sub(started).Round(time.Second),
		up.Sub(started).Round(time.Second), failed)

	sc := s.Schema
	require.True(t, waitUntil(3*time.Minute, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail`) == outageOrders &&
			sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status IN ('pending', 'sending')`) == 0
	}), "mails with work left: %v", sc.QueryMap(t, `SELECT dedupe_key, status || ' sends=' || sends FROM mail WHERE status IN ('pending','sending')`))

	sentOnce := map[string]int{}
	for _, e := range stand.Sent() {
		sentOnce[e.IdempotencyKey]++
	}
	var twice []string
	for k, n := range sentOnce {
		if n > 1 {
			twice = append(twice, k)
		}
	}
	freshAtRecovery := up.Add(-outageMaxAge)
	sum := map[string]int64{
		"sent":                    sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`),
		"failed stale":            sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND last_error LIKE 'stale: %'`),
		"failed, fresh at return": sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND occurred_at > $1`, freshAtRecovery),
		"unknown":                 sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'unknown'`),
		"attempts spent beyond one per sent mail": sc.QueryInt(t, `SELECT COALESCE(sum(sends), 0) FROM mail WHERE status = 'sent'`) -
			sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`),
		"attempts spent by mails not sent": sc.QueryInt(t, `SELECT COALESCE(sum(sends), 0) FROM mail WHERE status <> 'sent'`),
		"delivered twice by Resend":        int64(len(twice)),
		"requests the outage failed":       int64(failed),
	}
	t.Logf("resend outage summary: %v", sum)
	require.Equal(t, outageOrders, int(sum["sent"]+sum["failed stale"]), "every mail sent or failed stale: %v",
		sc.QueryMap(t, `SELECT dedupe_key, status || ' ' || COALESCE(last_error, '') FROM mail WHERE status NOT IN ('sent')`))
	require.Zero(t, sum["failed, fresh at return"], "a mail fresh when Resend came back is sent")
	require.Zero(t, sum["unknown"], "no Resend mail unknown inside its key window")
	require.Zero(t, sum["attempts spent beyond one per sent mail"], "the outage spent no attempt")
	require.Zero(t, sum["attempts spent by mails not sent"])
	require.Zero(t, sum["delivered twice by Resend"], "%v", twice)
	require.Positive(t, sum["failed stale"], "the outage outlasted some mails' max age")
	require.EqualValues(t, sum["sent"], len(sentOnce), "every sent mail is one Resend email")
}

// testThrottlingStorm: the relay answers throttling replies (SES's 454,
// a 421 4.7.0, a 451 4.7.1 rate limit) to every fifth transaction while
// orders come, throttleStorm times in all (fewer than the transactions:
// every reply is met).
func testThrottlingStorm(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("throttling storm random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	srv := smtptest.New(t, smtptest.Options{})
	replies := []smtptest.Fault{
		smtptest.ReplyText(454, "Throttling failure: Maximum sending rate exceeded. Try again in 1 seconds"),
		smtptest.ReplyText(421, "4.7.0 Temporary System Problem. Try again in 2 seconds"),
		smtptest.ReplyText(451, "4.7.1 Rate limit exceeded, try again in 1 seconds"),
	}
	var storm []smtptest.Fault
	for range throttleStorm {
		storm = append(storm, smtptest.Delay(0), smtptest.Delay(0), smtptest.Delay(0), smtptest.Delay(0), replies[rng.IntN(len(replies))])
	}
	srv.Inject(smtptest.Data, storm...)
	s := e2etest.NewStack(t, srv.Addr)
	s.Env["MAILSVC_SENDER_MAX_ATTEMPTS"] = "2"
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	procs := []*e2etest.Proc{s.Serve(nil), s.Serve(nil)}
	events := make([]e2etest.OrderEvent, 0, throttleOrders)
	for i := 1; i <= throttleOrders; i++ {
		events = append(events, e2etest.Confirmed(i, "vi"))
	}
	r := &chaosRig{t: t, s: s}
	require.NoError(t, <-r.publishPacedFresh(events, 30*time.Second))

	sc := s.Schema
	require.True(t, waitUntil(4*time.Minute, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == throttleOrders
	}), "%v", sc.QueryMap(t, `SELECT status, count(*)::text FROM mail GROUP BY 1`))
	var throttled float64
	for _, p := range procs {
		throttled += metricSum(p.Metrics(t), `mailsvc_provider_throttled_total{provider="smtp"}`)
	}
	sum := map[string]int64{
		"sent":                   sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`),
		"attempts spent":         sc.QueryInt(t, `SELECT sum(sends) FROM mail`),
		"throttling replies":     throttleStorm,
		"throttled (metric)":     int64(throttled),
		"delivered by the relay": int64(srv.Count()),
	}
	t.Logf("smtp throttling storm summary: %v", sum)
	require.EqualValues(t, throttleOrders, sum["attempts spent"], "one attempt per mail: the throttling spent none")
	require.EqualValues(t, throttleStorm, sum["throttled (metric)"])
	require.EqualValues(t, throttleOrders, sum["delivered by the relay"])
}

// metricSum returns the value of the sample line that starts with series
// in a /metrics text, 0 when absent.
func metricSum(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return 0
}

// publishPacedFresh is publishPaced with each event's occurred_at set as
// it is published, so that the max event age counts from the publish.
func (r *chaosRig) publishPacedFresh(events []e2etest.OrderEvent, d time.Duration) <-chan error {
	pub := e2etest.NewPublisher(r.t, r.s.Names)
	every := d / time.Duration(len(events))
	done := make(chan error, 1)
	go func() {
		pace := time.NewTicker(every)
		defer pace.Stop()
		for _, ev := range events {
			ev.OccurredAt = time.Now().UTC()
			if err := send(pub, []e2etest.OrderEvent{ev}); err != nil {
				done <- err
				return
			}
			<-pace.C
		}
		done <- nil
	}()
	return done
}
