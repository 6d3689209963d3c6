package bench

import (
	"bytes"
	"context"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"net/mail"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

const (
	// lanesBacklog is how many confirmations wait when the priority mails
	// come; lanesRelayRate (mails/s) is what the relay takes.
	lanesBacklog   = 100_000
	lanesRelayRate = 200
	// lanesBurst is how many resends and how many cancellation notices
	// are asked for at once; lanesWindow is each bulk-rate window.
	lanesBurst  = 50
	lanesWindow = 10 * time.Second
	// lanesOrder is the first order id of the burst's orders, far from the
	// backlog's ids (1..lanesBacklog).
	lanesOrder = 900_001
)

// BenchmarkLanes measures the priority lanes (docs/design.md, "Priority
// lanes"): with lanesBacklog confirmations pending in the bulk lane and a
// relay that takes lanesRelayRate mails/s (an SMTP server that answers
// each message after workers/rate), lanesBurst operator resends and
// lanesBurst cancellation notices (OrderCancelled events for orders whose
// confirmations were sent) are asked for at once. It reports the
// priority mails' latency from the request (the resend's commit, the
// cancel's publish confirm) to the relay's acceptance, p50/p99/max, and
// the bulk lane's rate over lanesWindow before and after the burst. Goals:
// p99 <= 2 s, bulk rate after >= 75 % of before. Exact counts: each
// priority mail delivered once. Run it with
//
//	go test -run '^$' -bench Lanes -benchtime 1x -timeout 10m . (in bench/)
func BenchmarkLanes(b *testing.B) {
	srv := smtptest.New(b, smtptest.Options{})
	s := e2etest.NewStack(b, srv.Addr)
	pub := e2etest.NewPublisher(b, s.Names)
	p := s.Serve(defaultSettings.env())
	defer p.Stop(b, 30*time.Second)

	// The burst's orders, confirmed and sent before the backlog exists.
	var orders []e2etest.OrderEvent
	for i := range 2 * lanesBurst {
		orders = append(orders, e2etest.Confirmed(lanesOrder+i, "vi"))
	}
	pub.Publish(b, orders...)
	waitSMTP(b, srv, len(orders), time.Minute)

	srv.SetDataDelay(time.Second * time.Duration(defaultSettings.workers) / lanesRelayRate)
	ctx := context.Background()
	require.NoError(b, storetest.Seed(ctx, s.Schema.Store, "bulk-", mailtype.StatusPending, lanesBacklog))
	warm := srv.Count() + 2*lanesRelayRate
	waitSMTP(b, srv, warm, time.Minute)
	windowStart := time.Now()
	<-time.After(lanesWindow) // a measuring window: the bulk lane's rate alone

	asked := map[string]time.Time{}
	burstAt := time.Now()
	for i := range lanesBurst {
		key, err := s.Schema.Store.Resend(ctx, fmt.Sprintf("order-confirmed:%d", lanesOrder+i), "shop.example", "bench")
		require.NoError(b, err)
		asked[key] = time.Now()
	}
	var cancels []e2etest.OrderEvent
	for i := lanesBurst; i < 2*lanesBurst; i++ {
		cancels = append(cancels, e2etest.Cancelled(lanesOrder+i))
	}
	pub.Publish(b, cancels...)
	for i := lanesBurst; i < 2*lanesBurst; i++ {
		asked[mailtype.CancelNoticeKey(fmt.Sprint(lanesOrder+i), 1)] = time.Now()
	}
	<-time.After(time.Until(burstAt.Add(lanesWindow))) // the second window
	r := lanesResult(b, srv.Messages(), asked, windowStart, burstAt)
	r.claimed = claimedByLane(b, p.Metrics(b))
	fmt.Println(r)
}

// waitSMTP waits until srv took n messages.
func waitSMTP(b *testing.B, srv *smtptest.Server, n int, within time.Duration) {
	require.Eventually(b, func() bool { return srv.Count() >= n }, within, 5*time.Millisecond, "SMTP messages, want %d", n)
}

// lanesFigures is what BenchmarkLanes reports.
type lanesFigures struct {
	p50, p99, max          time.Duration
	bulkBefore, bulkDuring float64 // mails/s of the bulk lane in each window
	claimed                string
}

// lanesResult reads the messages the relay took: each asked key exactly
// once (its latency from asked), and the bulk mails (keys bulk-…) in the
// window before burstAt and the one after.
func lanesResult(b *testing.B, msgs []smtptest.Message, asked map[string]time.Time, windowStart, burstAt time.Time) lanesFigures {
	seen := map[string]int{}
	var lat []time.Duration
	var before, during int
	for _, m := range msgs {
		key := dedupeKeyOf(b, m.Data)
		switch {
		case strings.HasPrefix(key, "bulk-"):
			if !m.At.Before(windowStart) && m.At.Before(burstAt) {
				before++
			} else if !m.At.Before(burstAt) && m.At.Before(burstAt.Add(lanesWindow)) {
				during++
			}
		default:
			if at, ok := asked[key]; ok {
				seen[key]++
				lat = append(lat, m.At.Sub(at))
			}
		}
	}
	require.Len(b, seen, len(asked), "every priority mail delivered within the window")
	for k, n := range seen {
		require.Equal(b, 1, n, "deliveries of %s", k)
	}
	slices.Sort(lat)
	secs := lanesWindow.Seconds()
	return lanesFigures{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], max: lat[len(lat)-1],
		bulkBefore: float64(before) / secs, bulkDuring: float64(during) / secs}
}

func (f lanesFigures) String() string {
	keep := f.bulkDuring / f.bulkBefore
	return fmt.Sprintf("lanes: %d bulk mails pending, relay %d mails/s, %d resends + %d cancellation notices at once\n"+
		"priority latency request -> relay: p50 %.0f ms, p99 %.0f ms, max %.0f ms (goal p99 <= 2000 ms: %s)\n"+
		"bulk lane: %.0f mails/s before, %.0f mails/s in the %s after (%.0f %%; goal >= 75 %%: %s)\n"+
		"mailsvc_claimed_total: %s",
		lanesBacklog, lanesRelayRate, lanesBurst, lanesBurst, ms(f.p50), ms(f.p99), ms(f.max), passFail(f.p99 <= 2*time.Second),
		f.bulkBefore, f.bulkDuring, lanesWindow, 100*keep, passFail(keep >= 0.75), f.claimed)
}

func passFail(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// dedupeKeyOf reads a message's X-Dedupe-Key header.
func dedupeKeyOf(b *testing.B, data []byte) string {
	m, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(b, err)
	return m.Header.Get("X-Dedupe-Key")
}

// claimedByLane reads mailsvc_claimed_total from a /metrics page.
func claimedByLane(b *testing.B, page string) string {
	var out []string
	for line := range strings.Lines(page) {
		if strings.HasPrefix(line, "mailsvc_claimed_total{") {
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "mailsvc_claimed_total")))
		}
	}
	require.Len(b, out, 2, "mailsvc_claimed_total by lane")
	return strings.Join(out, ", ")
}
