package e2e

import (
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The chaos run: chaosOrders orders published at a steady pace over
// publishWindow, while faults run for chaosWindow, against two replicas.
const (
	chaosOrders   = 2000
	publishWindow = 75 * time.Second
	chaosWindow   = 85 * time.Second
	// chaosLease and chaosSendTimeout are as short as the config check
	// allows (the lease must exceed the send timeout by 10 s).
	chaosLease       = 12 * time.Second
	chaosSendTimeout = 2 * time.Second
	chaosWorkers     = 8
	// chaosGrace is the janitor's grace for a started send whose lease
	// expired: twice the pool's database timeout (10 s, not configurable)
	// plus a second.
	chaosGrace = 21 * time.Second
	// lostReplyEvery picks the orders whose recipient never gets a reply
	// to DATA, on every attempt: ids with id % lostReplyEvery == 17.
	lostReplyEvery = 250
)

// orderKind is what the chaos plan does with one order.
type orderKind int

const (
	plain       orderKind = iota
	duplicated            // the same event twice (a producer retry)
	sameIntent            // a second event with a new event_id, same dedupe_key
	cancelFirst           // OrderCancelled published before OrderConfirmed
	cancelLater           // OrderCancelled published ~200 events later
	lostReply             // plain, but the SMTP server never answers its DATA
)

// chaosPlan is the publish sequence and what each order is.
type chaosPlan struct {
	events []e2etest.OrderEvent
	kind   map[string]orderKind // by dedupe key
	// lostRcpt are the recipients of the lostReply orders.
	lostRcpt map[string]bool
}

func (k orderKind) hasCancel() bool { return k == cancelFirst || k == cancelLater }

func newChaosPlan(rng *rand.Rand) *chaosPlan {
	p := &chaosPlan{kind: map[string]orderKind{}, lostRcpt: map[string]bool{}}
	later := map[int][]e2etest.OrderEvent{} // publish position -> events due then
	schedule := func(at int, ev e2etest.OrderEvent) { later[at] = append(later[at], ev) }
	for i := 1; i <= chaosOrders; i++ {
		ev := e2etest.Confirmed(i, map[bool]string{true: "vi", false: "en"}[i%2 == 1])
		k := orderKind(0)
		switch r := rng.IntN(100); {
		case i%lostReplyEvery == 17:
			k = lostReply
			p.lostRcpt[ev.Data["email"].(string)] = true
		case r < 10:
			k = duplicated
		case r < 15:
			k = sameIntent
		case r < 18:
			k = cancelFirst
		case r < 21:
			k = cancelLater
		}
		p.kind[ev.DedupeKey] = k
		switch k {
		case cancelFirst:
			p.events = append(p.events, e2etest.Cancelled(i), ev)
		case duplicated:
			p.events = append(p.events, ev)
			schedule(len(p.events)+rng.IntN(50), ev)
		case sameIntent:
			again := ev
			again.EventID = e2etest.NewID()
			p.events = append(p.events, ev)
			schedule(len(p.events)+rng.IntN(50), again)
		case cancelLater:
			p.events = append(p.events, ev)
			schedule(len(p.events)+150+rng.IntN(100), e2etest.Cancelled(i))
		default:
			p.events = append(p.events, ev)
		}
		for at := range later {
			if at <= len(p.events) {
				p.events = append(p.events, later[at]...)
				delete(later, at)
			}
		}
	}
	keys := make([]int, 0, len(later))
	for k := range later {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		p.events = append(p.events, later[k]...)
	}
	return p
}

// chaosSeed is MAILSVC_CHAOS_SEED when set (to replay a run), else the
// clock.
func chaosSeed(t *testing.T) uint64 {
	if v := os.Getenv("MAILSVC_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "MAILSVC_CHAOS_SEED")
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// TestChaos runs two replicas through crashes, pauses, database cuts and
// blackholes, a broker cut, a relay leader whose host vanishes and an SMTP
// server that loses replies, and checks that every mail ended truthfully.
func TestChaos(t *testing.T) {
	t.Parallel()
	seed := chaosSeed(t)
	t.Logf("chaos random seed %d (replay with MAILSVC_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	plan := newChaosPlan(rng)
	r := newChaosRig(t, plan)
	r.note("random seed %d (the plan and the fault schedule derive from it)", seed)
	fb := e2etest.NewFeedbackQueue(t, r.s.Names)
	_, err := r.s.CLI("migrate")
	require.NoError(t, err)
	r.startOwnerLog()
	r.procs[0], r.procs[1] = r.serve(0), r.serve(1)

	started := time.Now()
	published := r.publishPaced(plan.events, publishWindow)
	r.run(rng, started)
	require.NoError(t, <-published, "publish the plan")
	r.note("chaos over after %s; waiting for every mail to settle", time.Since(started).Round(time.Second))
	r.settle(plan)
	r.check(plan, fb)
}

// run does faults until chaosWindow passed: first the relay leader's host
// vanishes (once traffic flows), then random faults; it returns when no
// process is paused any more.
func (r *chaosRig) run(rng *rand.Rand, started time.Time) {
	end := started.Add(chaosWindow)
	for time.Now().Before(end) || r.pausedAny() {
		r.resumeDue()
		switch {
		case r.vanishes == 0 && !r.pausedAny() && time.Since(started) > 5*time.Second:
			r.vanishLeader()
		case time.Now().Before(end):
			r.step(rng, end)
		}
		// The gap between two faults: until the SMTP server took some
		// more mails (traffic flows between faults), at most a few seconds.
		taken, more := r.smtp.Count(), 20+rng.IntN(40)
		waitUntil(time.Duration(1000+rng.IntN(2000))*time.Millisecond, func() bool { return r.smtp.Count() >= taken+more })
	}
}

// settle waits until no mail has work left and every outbox row is
// published.
func (r *chaosRig) settle(plan *chaosPlan) {
	sc := r.s.Schema
	var cancels int64
	for _, k := range plan.kind {
		if k.hasCancel() {
			cancels++
		}
	}
	// Every cancel has been answered (EmailCancelled or
	// EmailCancelTooLate), every mail is done, every event published.
	settled := waitUntil(3*time.Minute, func() bool {
		return sc.QueryInt(r.t, `SELECT count(DISTINCT dedupe_key) FROM outbox WHERE event_type IN ('EmailCancelled', 'EmailCancelTooLate')`) == cancels &&
			sc.QueryInt(r.t, `SELECT count(*) FROM mail WHERE template = 'order_confirmed'`) == int64(len(plan.kind)) &&
			sc.QueryInt(r.t, `SELECT count(*) FROM mail WHERE status IN ('pending','sending')`) == 0 &&
			sc.QueryInt(r.t, `SELECT count(*) FROM outbox WHERE published_at IS NULL`) == 0
	})
	if !settled {
		r.diagnose(plan)
	}
}

// diagnose prints why the run did not settle, then fails the test.
func (r *chaosRig) diagnose(plan *chaosPlan) {
	sc := r.s.Schema
	answered := sc.QueryMap(r.t, `SELECT dedupe_key, string_agg(event_type, ',') FROM outbox GROUP BY 1`)
	statuses := sc.QueryMap(r.t, `SELECT dedupe_key, status || ' attempts=' || attempts || ' sends=' || sends || ' cancel_requested=' || cancel_requested || ' locked_by=' || coalesce(locked_by, '') FROM mail`)
	var missing, open []string
	for key, k := range plan.kind {
		if k.hasCancel() && !strings.Contains(answered[key], "Cancel") {
			missing = append(missing, fmt.Sprintf("%s kind=%d state=%q feedback=%q", key, k, statuses[key], answered[key]))
		}
		if st := statuses[key]; strings.HasPrefix(st, "pending") || strings.HasPrefix(st, "sending") {
			open = append(open, key+" "+st)
		}
	}
	r.t.Logf("input queue depth %d, dead-letter queue depth %d, unpublished outbox rows %d", queueDepth(r.t, r.s.Names.Queue),
		queueDepth(r.t, r.s.Names.DeadLetterQueue), sc.QueryInt(r.t, `SELECT count(*) FROM outbox WHERE published_at IS NULL`))
	r.t.Logf("cancels without an answer (%d): %s", len(missing), strings.Join(missing, "\n"))
	r.t.Logf("mails with work left (%d): %s", len(open), strings.Join(open, "\n"))
	r.t.Logf("chaos log:\n%s", strings.Join(r.log, "\n"))
	for i, p := range r.procs {
		r.t.Logf("process %d log tail:\n%s", i, tail(p.Logs.String(), 6000))
	}
	r.t.FailNow()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
