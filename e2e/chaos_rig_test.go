package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// chaosRig is the system under chaos: two mailsvc processes, each with its
// own database link (a Hole that can blackhole it) into a shared TCP proxy
// to PostgreSQL (which can cut it for both), a shared proxy to RabbitMQ,
// and a fault-injecting SMTP server.
type chaosRig struct {
	t     *testing.T
	s     *e2etest.Stack
	smtp  *smtptest.Server
	db    *testproxy.Proxy
	holes [2]*testproxy.Hole
	amqp  *testproxy.Proxy
	procs [2]*e2etest.Proc
	host  string

	owners *ownerLog
	// faults are the kills, pauses and vanished hosts, in order, each with
	// the sends its process had started and not recorded.
	faults []*fault
	// pausedUntil is when a SIGSTOPped process gets its SIGCONT (zero:
	// running); pauseOf its fault.
	pausedUntil [2]time.Time
	pauseOf     [2]*fault
	// counts counts the faults by kind, for the summary.
	counts   map[string]int
	vanishes int
	// firstRound are the fault kinds still to run once, in order.
	firstRound []int
	takeover   []string // what each leader vanish led to

	logMu sync.Mutex
	log   []string // what the chaos did, in order
}

func newChaosRig(t *testing.T, plan *chaosPlan) *chaosRig {
	srv := smtptest.New(t, smtptest.Options{
		// A relay answers after a while: the window in which a crash leaves
		// an accepted mail unrecorded.
		DataDelay: 150 * time.Millisecond,
		LoseReplyFor: func(rcpt string) bool {
			return plan.lostRcpt[strings.ToLower(strings.Trim(rcpt, "<>"))]
		},
	})
	s := e2etest.NewStack(t, srv.Addr)
	db := testproxy.New(t, testproxy.HostPort(t, storetest.URL(), "5432"))
	mq := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	for k, v := range map[string]string{
		"MAILSVC_DATABASE_URL":               db.RewriteURL(t, s.Schema.URL),
		"MAILSVC_AMQP_URL":                   mq.RewriteURL(t, brokertest.URL()),
		"MAILSVC_SENDER_WORKERS":             fmt.Sprint(chaosWorkers),
		"MAILSVC_SENDER_SEND_TIMEOUT":        chaosSendTimeout.String(),
		"MAILSVC_SENDER_LEASE":               chaosLease.String(),
		"MAILSVC_SENDER_MAX_ATTEMPTS":        "50",
		"MAILSVC_SENDER_AMBIGUOUS_POLICY":    "retry",
		"MAILSVC_SENDER_AMBIGUOUS_RETRIES":   "1",
		"MAILSVC_SENDER_SHUTDOWN_TIMEOUT":    "5s",
		"MAILSVC_AMQP_RECONNECT_BACKOFF":     "100ms",
		"MAILSVC_AMQP_RECONNECT_BACKOFF_MAX": "1s",
	} {
		s.Env[k] = v
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	r := &chaosRig{t: t, s: s, smtp: srv, db: db, amqp: mq, host: host, counts: map[string]int{}}
	for i := range r.holes {
		r.holes[i] = testproxy.NewHole(t, db.Addr)
	}
	return r
}

// serve starts replica i on its own database link.
func (r *chaosRig) serve(i int) *e2etest.Proc {
	return r.s.Serve(map[string]string{"MAILSVC_DATABASE_URL": r.holes[i].RewriteURL(r.t, r.s.Schema.URL)})
}

// worker is the locked_by of replica i's claims (sender.Config.WorkerID:
// hostname/pid).
func (r *chaosRig) worker(i int) string {
	return fmt.Sprintf("%s/%d", r.host, r.procs[i].Cmd.Process.Pid)
}

func (r *chaosRig) note(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	r.log = append(r.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// publishPaced publishes events in batches spread evenly over d from a
// goroutine of its own (so that sends are in flight at every fault), with
// publisher confirms, straight to RabbitMQ. The channel gets nil or the
// first error once every batch is published.
func (r *chaosRig) publishPaced(events []e2etest.OrderEvent, d time.Duration) <-chan error {
	pub := e2etest.NewPublisher(r.t, r.s.Names)
	const batch = 20
	batches := (len(events) + batch - 1) / batch
	every := d / time.Duration(batches)
	done := make(chan error, 1)
	go func() {
		pace := time.NewTicker(every) // the load's pace
		defer pace.Stop()
		for b := 0; b < batches; b++ {
			if err := send(pub, events[b*batch:min((b+1)*batch, len(events))]); err != nil {
				done <- err
				return
			}
			<-pace.C
		}
		r.note("all %d events published", len(events))
		done <- nil
	}()
	return done
}

// send publishes events with confirms and returns the first error.
func send(p *e2etest.Publisher, evs []e2etest.OrderEvent) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var confs []*amqp.DeferredConfirmation
	for _, ev := range evs {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		key := "order.confirmed"
		if ev.EventType == "OrderCancelled" {
			key = "order.cancelled"
		}
		c, err := p.Ch.PublishWithDeferredConfirmWithContext(ctx, p.Ex, key, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: ev.EventID, Type: ev.EventType, Body: body,
		})
		if err != nil {
			return err
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("broker nacked a test event")
		}
	}
	return nil
}
