package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/mail"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// chaosOrders is the number of orders of the chaos run.
const chaosOrders = 2000

// orderKind is what the chaos plan does with one order.
type orderKind int

const (
	plain       orderKind = iota
	duplicated            // the same event twice (a producer retry)
	sameIntent            // a second event with a new event_id, same dedupe_key
	cancelFirst           // OrderCancelled published before OrderConfirmed
	cancelLater           // OrderCancelled published ~200 events later
)

// chaosPlan is the publish sequence and what each order is.
type chaosPlan struct {
	events []orderEvent
	kind   map[string]orderKind // by dedupe key
}

func newChaosPlan(rng *rand.Rand) *chaosPlan {
	p := &chaosPlan{kind: map[string]orderKind{}}
	later := map[int][]orderEvent{} // publish position -> events due then
	schedule := func(at int, ev orderEvent) { later[at] = append(later[at], ev) }
	for i := 1; i <= chaosOrders; i++ {
		ev := confirmed(i, map[bool]string{true: "vi", false: "en"}[i%2 == 1])
		k := orderKind(0)
		switch r := rng.IntN(100); {
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
			p.events = append(p.events, cancelled(i), ev)
		case duplicated:
			p.events = append(p.events, ev)
			schedule(len(p.events)+rng.IntN(50), ev)
		case sameIntent:
			again := ev
			again.EventID = newID()
			p.events = append(p.events, ev)
			schedule(len(p.events)+rng.IntN(50), again)
		case cancelLater:
			p.events = append(p.events, ev)
			schedule(len(p.events)+150+rng.IntN(100), cancelled(i))
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

// chaosRig is the system under chaos: two mailsvc processes behind TCP
// proxies to PostgreSQL and RabbitMQ, and a fault-injecting SMTP server.
type chaosRig struct {
	t     *testing.T
	s     *stack
	smtp  *smtptest.Server
	db    *testproxy.Proxy
	amqp  *testproxy.Proxy
	procs [2]*proc
	log   []string    // what the chaos did, in order
	kills []time.Time // when a process was SIGKILLed
}

func newChaosRig(t *testing.T) *chaosRig {
	srv := smtptest.New(t, smtptest.Options{})
	s := newStack(t, srv.Addr)
	db := testproxy.New(t, testproxy.HostPort(t, storetest.URL(), "5432"))
	mq := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	for k, v := range map[string]string{
		"MAILSVC_DATABASE_URL":               db.RewriteURL(t, s.schema.URL),
		"MAILSVC_AMQP_URL":                   mq.RewriteURL(t, brokertest.URL()),
		"MAILSVC_SENDER_SEND_TIMEOUT":        "2s",
		"MAILSVC_SENDER_LEASE":               "12s",
		"MAILSVC_SENDER_MAX_ATTEMPTS":        "50",
		"MAILSVC_SENDER_SHUTDOWN_TIMEOUT":    "5s",
		"MAILSVC_AMQP_RECONNECT_BACKOFF":     "100ms",
		"MAILSVC_AMQP_RECONNECT_BACKOFF_MAX": "1s",
	} {
		s.env[k] = v
	}
	return &chaosRig{t: t, s: s, smtp: srv, db: db, amqp: mq}
}

func (r *chaosRig) note(format string, args ...any) {
	r.log = append(r.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// step does one random fault and undoes it (cuts last 3 s).
func (r *chaosRig) step(rng *rand.Rand) {
	switch rng.IntN(5) {
	case 0, 1:
		i := rng.IntN(2)
		r.kills = append(r.kills, time.Now())
		r.procs[i].kill()
		r.note("SIGKILL process %d", i)
		r.procs[i] = r.s.serve(nil)
		r.note("restarted process %d", i)
	case 2:
		r.note("cut PostgreSQL")
		r.db.Cut()
		time.Sleep(3 * time.Second) // the outage itself, not a wait for a condition
		r.db.Restore(r.t)
		r.note("restored PostgreSQL")
	case 3:
		r.note("cut RabbitMQ")
		r.amqp.Cut()
		time.Sleep(3 * time.Second) // the outage itself
		r.amqp.Restore(r.t)
		r.note("restored RabbitMQ")
	case 4:
		r.smtp.Inject(smtptest.Data, smtptest.Hang(), smtptest.Hang())
		r.note("SMTP: the next two messages are taken and their replies never sent")
	}
}

func TestChaos(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	r := newChaosRig(t)
	r.note("random seed %d (the plan and the fault schedule derive from it)", seed)
	fb := newFeedbackQueue(t, r.s.names)
	pub := newPublisher(t, r.s.names)
	_, err := r.s.cli("migrate")
	require.NoError(t, err)
	r.procs[0], r.procs[1] = r.s.serve(nil), r.s.serve(nil)

	plan := newChaosPlan(rng)
	started := time.Now()
	nextFault := time.Now().Add(2 * time.Second)
	for i := 0; i < len(plan.events); i += 40 {
		pub.publish(t, plan.events[i:min(i+40, len(plan.events))]...)
		if time.Now().After(nextFault) {
			r.step(rng)
			nextFault = time.Now().Add(time.Duration(1500+rng.IntN(2500)) * time.Millisecond)
		}
	}
	for time.Since(started) < 75*time.Second {
		r.step(rng)
	}
	r.note("chaos over after %s; waiting for every mail to settle", time.Since(started).Round(time.Second))
	r.settle(plan)
	r.check(plan, fb)
}

// settle waits until no mail has work left and every outbox row is
// published.
func (r *chaosRig) settle(plan *chaosPlan) {
	sc := r.s.schema
	var cancels int64
	for _, k := range plan.kind {
		if k == cancelFirst || k == cancelLater {
			cancels++
		}
	}
	settled := assert.Eventually(r.t, func() bool {
		// Every cancel has been answered (EmailCancelled or
		// EmailCancelTooLate), every mail is done, every event published.
		return sc.QueryInt(r.t, `SELECT count(DISTINCT dedupe_key) FROM outbox WHERE event_type IN ('EmailCancelled', 'EmailCancelTooLate')`) == cancels &&
			sc.QueryInt(r.t, `SELECT count(*) FROM mail`) == int64(len(plan.kind)) &&
			sc.QueryInt(r.t, `SELECT count(*) FROM mail WHERE status IN ('pending','sending')`) == 0 &&
			sc.QueryInt(r.t, `SELECT count(*) FROM outbox WHERE published_at IS NULL`) == 0
	}, 3*time.Minute, 250*time.Millisecond)
	if !settled {
		r.diagnose(plan)
	}
}

// diagnose prints why the run did not settle, then fails the test.
func (r *chaosRig) diagnose(plan *chaosPlan) {
	sc := r.s.schema
	answered := sc.QueryMap(r.t, `SELECT dedupe_key, string_agg(event_type, ',') FROM outbox GROUP BY 1`)
	statuses := sc.QueryMap(r.t, `SELECT dedupe_key, status || ' attempts=' || attempts || ' cancel_requested=' || cancel_requested FROM mail`)
	var missing []string
	for key, k := range plan.kind {
		if (k == cancelFirst || k == cancelLater) && !strings.Contains(answered[key], "Cancel") {
			missing = append(missing, fmt.Sprintf("%s kind=%d state=%q feedback=%q", key, k, statuses[key], answered[key]))
		}
	}
	r.t.Logf("input queue depth %d, dead-letter queue depth %d", queueDepth(r.t, r.s.names.Queue), queueDepth(r.t, r.s.names.DeadLetterQueue))
	r.t.Logf("cancels without an answer (%d): %s", len(missing), strings.Join(missing, "\n"))
	r.t.Logf("chaos log:\n%s", strings.Join(r.log, "\n"))
	for i, p := range r.procs {
		r.t.Logf("process %d log tail:\n%s", i, tail(p.logs.String(), 4000))
	}
	r.t.FailNow()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// delivery is one message the SMTP server took.
type delivery struct {
	at        time.Time
	replyLost string
	messageID string
	body      []byte
}

// deliveriesByKey groups the SMTP server's messages by X-Dedupe-Key.
func (r *chaosRig) deliveriesByKey() map[string][]delivery {
	out := map[string][]delivery{}
	for _, m := range r.smtp.Messages() {
		msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
		require.NoError(r.t, err)
		key := msg.Header.Get("X-Dedupe-Key")
		require.NotEmpty(r.t, key, "a delivered mail without X-Dedupe-Key")
		out[key] = append(out[key], delivery{at: m.At, replyLost: m.ReplyLost, messageID: msg.Header.Get("Message-Id"), body: m.Data})
	}
	return out
}

// duplicateCause explains why key was delivered more than once: an earlier
// delivery whose reply was lost (ambiguous, retried under policy retry) or
// a process killed between an earlier delivery and the next one (killed
// after DATA, before recording sent). "" means no allowed cause.
func (r *chaosRig) duplicateCause(ds []delivery) string {
	for i := 0; i < len(ds)-1; i++ {
		if ds[i].replyLost != "" {
			return "ambiguous reply (" + ds[i].replyLost + ")"
		}
		for _, k := range r.kills {
			if k.After(ds[i].at) && k.Before(ds[i+1].at) {
				return "process killed after DATA"
			}
		}
	}
	return ""
}

// chaosSummary is what the run prints.
type chaosSummary struct {
	published, rows, delivered, duplicates int
	byStatus                               map[string]int64
	causes                                 map[string]int
	feedback, stuck, deadLettered          int64
}

func (r *chaosRig) check(plan *chaosPlan, fb *feedbackQueue) {
	t, sc := r.t, r.s.schema
	sum := chaosSummary{published: len(plan.events), byStatus: map[string]int64{}, causes: map[string]int{}}
	sum.rows = int(sc.QueryInt(t, `SELECT count(*) FROM mail`))
	for _, st := range []string{"pending", "sending", "sent", "failed", "cancelled", "unknown"} {
		sum.byStatus[st] = sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = $1`, st)
	}
	sum.stuck = sum.byStatus["sending"]
	sum.feedback = sc.QueryInt(t, `SELECT count(*) FROM outbox`)
	sum.deadLettered = int64(queueDepth(t, r.s.names.DeadLetterQueue))
	var broken []string
	dels := r.deliveriesByKey()
	statuses := sc.QueryMap(t, `SELECT dedupe_key, status FROM mail`)
	tooLate := sc.QueryMap(t, `SELECT dedupe_key, count(*)::text FROM outbox WHERE event_type = 'EmailCancelTooLate' GROUP BY 1`)
	for key, kind := range plan.kind {
		ds := dels[key]
		sum.delivered += len(ds)
		status := statuses[key]
		broken = append(broken, r.checkMail(key, kind, status, ds, &sum)...)
		if (kind == cancelFirst || kind == cancelLater) && status == "sent" && tooLate[key] != "1" {
			broken = append(broken, fmt.Sprintf("%s: sent after a cancel without exactly one EmailCancelTooLate (%q)", key, tooLate[key]))
		}
	}
	broken = append(broken, r.checkFeedbackRows()...)
	broken = append(broken, r.checkPublished(fb)...)
	if sum.stuck != 0 || sum.deadLettered != 0 || sum.rows != len(plan.kind) || sum.byStatus["failed"] != 0 {
		broken = append(broken, fmt.Sprintf("stuck=%d dead-lettered=%d rows=%d/%d failed=%d", sum.stuck, sum.deadLettered, sum.rows, len(plan.kind), sum.byStatus["failed"]))
	}
	t.Logf("chaos summary: events published %d, rows %d, rows by status %v, mails delivered %d, duplicate deliveries %d (causes %v), feedback events %d, stuck in sending %d, dead-lettered %d",
		sum.published, sum.rows, sum.byStatus, sum.delivered, sum.duplicates, sum.causes, sum.feedback, sum.stuck, sum.deadLettered)
	t.Logf("chaos log:\n%s", strings.Join(r.log, "\n"))
	require.Empty(t, broken, "broken invariants")
}

// checkMail checks one order's end state against its plan (invariants 1,
// 3, 5, 7, 9 of DESIGN.md section 8).
func (r *chaosRig) checkMail(key string, kind orderKind, status string, ds []delivery, sum *chaosSummary) []string {
	var broken []string
	if len(ds) > 1 {
		sum.duplicates += len(ds) - 1
		cause := r.duplicateCause(ds)
		sum.causes[cause]++
		if cause == "" {
			broken = append(broken, fmt.Sprintf("%s delivered %d times with no ambiguous reply or kill to explain it", key, len(ds)))
		}
		for _, d := range ds[1:] {
			if d.messageID != ds[0].messageID || !sameBody(d.body, ds[0].body) {
				broken = append(broken, key+": attempts carried different content or Message-ID")
			}
		}
	}
	hasCancel := kind == cancelFirst || kind == cancelLater
	switch {
	case hasCancel && status != "sent" && status != "cancelled":
		broken = append(broken, fmt.Sprintf("%s: order with a cancel ended %s", key, status))
	case !hasCancel && (status != "sent" || len(ds) == 0):
		broken = append(broken, fmt.Sprintf("%s: ended %s with %d deliveries, want sent", key, status, len(ds)))
	case status == "cancelled" && len(ds) > 0 && r.duplicateCause(append(ds, delivery{at: time.Now()})) == "":
		// Cancelled yet delivered is possible only where the outcome of a
		// send was unknowable: a lost reply or a worker killed after DATA.
		// (Two competing consumers, or a redelivery after a crash, may
		// process a cancel after its confirm even when it was published
		// first: then "sent + EmailCancelTooLate" is the right outcome.)
		broken = append(broken, fmt.Sprintf("%s: cancelled yet delivered %d times without an ambiguous send", key, len(ds)))
	}
	return broken
}

// sameBody compares two deliveries of one mail. The Date header is part
// of the rendered content too, so the bytes must be equal.
func sameBody(a, b []byte) bool { return bytes.Equal(a, b) }

// checkFeedbackRows: exactly one terminal outbox row per terminal mail
// (invariant 6).
func (r *chaosRig) checkFeedbackRows() []string {
	sc := r.s.schema
	var broken []string
	for st, et := range map[string]string{"sent": "EmailSent", "cancelled": "EmailCancelled", "failed": "EmailFailed"} {
		n := sc.QueryInt(r.t, `SELECT count(*) FROM mail m WHERE status = $1 AND
			(SELECT count(*) FROM outbox o WHERE o.dedupe_key = m.dedupe_key AND o.event_type = $2) <> 1`, st, et)
		if n != 0 {
			broken = append(broken, fmt.Sprintf("%d %s mails without exactly one %s outbox row", n, st, et))
		}
	}
	return broken
}

// checkPublished: every outbox row reached mail.events at least once, with
// message_id = event_id.
func (r *chaosRig) checkPublished(fb *feedbackQueue) []string {
	want := r.s.schema.QueryInt(r.t, `SELECT count(*) FROM outbox`)
	got := map[string]bool{}
	for _, f := range fb.collect(r.t, int(want), time.Minute) {
		if f.MessageID != f.EventID {
			return []string{"a feedback event whose message_id is not its event_id"}
		}
		got[f.EventID] = true
	}
	for len(got) < int(want) {
		for _, f := range fb.collect(r.t, 1, 30*time.Second) {
			got[f.EventID] = true
		}
	}
	return nil
}

// queueDepth returns the number of ready messages in a queue.
func queueDepth(t testing.TB, name string) int {
	conn := brokertest.Dial(t)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	require.NoError(t, err, "queue %s", name)
	return q.Messages
}
