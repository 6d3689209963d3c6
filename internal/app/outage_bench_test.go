package app

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// scrape is one /metrics body as series text -> value ("name{labels}"
// exactly as exported).
type scrape map[string]float64

func parseMetrics(body string) scrape {
	s := scrape{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			s[l[:i]] = v
		}
	}
	return s
}

// value is a series' value; ok is false when it is not exported.
func (s scrape) value(series string) (float64, bool) { v, ok := s[series]; return v, ok }

// quantile is the q-quantile of histogram name between two scrapes, as
// histogram_quantile over their difference computes it; NaN without
// observations.
func quantile(q float64, name string, before, after scrape) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range after {
		rest, ok := strings.CutPrefix(k, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64)
		if err != nil {
			le = math.Inf(1)
		}
		bs = append(bs, bucket{le, v - before[k]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].n
	lo, below := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			return lo + (b.le-lo)*(rank-below)/(b.n-below)
		}
		lo, below = b.le, b.n
	}
	return lo
}

// sample is what the dashboard would show at one instant.
type sample struct {
	wall    time.Time
	at      time.Duration
	phase   string
	m       scrape
	ready   int
	readyz  string
	publish int64
}

// BenchmarkDashboardDuringADatabaseOutage is a measurement, not a speed
// benchmark: `go test -run '^$' -bench DatabaseOutage -benchtime 1x
// ./internal/app/` runs the real wiring with its database behind a proxy,
// publishes 10 order events a second, cuts the database for 60 s and
// prints what the dashboard's metrics read before, during and after. It
// checks what an operator relies on: the broker's queue gauges stay
// exported through the outage and show the backlog, /readyz names the
// database, the stats gauges age, and afterwards every event is recorded
// and the backlog drains.
func BenchmarkDashboardDuringADatabaseOutage(b *testing.B) {
	const rate, before, outage, drainMax = 10, 15 * time.Second, 60 * time.Second, 90 * time.Second
	sc := storetest.New(b)
	n := brokertest.New(b)
	px := testproxy.New(b, testproxy.HostPort(b, sc.URL, "5432"))
	mail := smtptest.New(b, smtptest.Options{})
	d := startDaemon(b, secretConfig(b, sc, px.Addr, n, map[string]string{
		"MAILSVC_SMTP_HOST": mail.Host, "MAILSVC_SMTP_PORT": strconv.Itoa(mail.Port), "MAILSVC_SMTP_TLS": "none",
		"MAILSVC_SMTP_USERNAME": "", "MAILSVC_SMTP_PASSWORD": "", "MAILSVC_AMQP_EVENTS_QUEUE": n.EventsQueue,
		"MAILSVC_LOG_LEVEL": "warn",
	}))
	addr := d.http.addr
	require.Eventually(b, func() bool { c, _ := get(b, addr, "/readyz"); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	var published atomic.Int64
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishSteadily(n, rate, stop, &published) }()

	start := time.Now()
	phase := "before"
	var samples []sample
	take := func() sample {
		code, body := get(b, addr, "/readyz")
		_, mbody := get(b, addr, "/metrics")
		s := sample{wall: time.Now(), at: time.Since(start).Round(time.Second), phase: phase, m: parseMetrics(mbody), readyz: strconv.Itoa(code), publish: published.Load()}
		if code != http.StatusOK {
			if i := strings.Index(body, `"check":"`); i >= 0 {
				s.readyz += " " + strings.SplitN(body[i+9:], `"`, 2)[0]
			}
		}
		if v, ok := s.m.value(`mailsvc_queue_messages{queue="input",state="ready"}`); ok {
			s.ready = int(v)
		} else {
			s.ready = -1
		}
		samples = append(samples, s)
		return s
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wait := func(until time.Duration) {
		for time.Since(start) < until {
			<-tick.C
			take()
		}
	}
	wait(before)
	px.Cut()
	phase = "outage"
	wait(before + outage)
	px.Restore(b)
	phase = "after"
	restored, backlog := time.Since(start), published.Load()
	var drainedAt time.Duration
	for time.Since(start) < restored+drainMax {
		<-tick.C
		s := take()
		// Drained: every event published before the restore is recorded (the
		// producer goes on publishing meanwhile) and the broker's gauge is 0.
		if s.ready == 0 && s.m[`mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="inserted"}`] >= float64(backlog) {
			drainedAt = s.at - restored
			break
		}
	}
	close(stop)
	require.NoError(b, <-pubDone)
	if drainedAt == 0 {
		report(b, samples, restored, drainedAt, samples[len(samples)-1])
		b.Fatalf("the backlog did not drain within %s of the restore; logs:\n%s", drainMax, tail(d.logs.String(), 40))
	}
	want := published.Load()
	require.Eventually(b, func() bool { return sc.QueryInt(b, `SELECT count(*) FROM mail`) == want }, 60*time.Second, 100*time.Millisecond,
		"every published event has its row")
	require.Eventually(b, func() bool { return int64(mail.Count()) == want }, 60*time.Second, 100*time.Millisecond, "and its mail")
	last := take()

	report(b, samples, restored, drainedAt, last)
	checkOutage(b, samples)
}

// publishSteadily publishes rate OrderConfirmed events a second, each
// confirmed, until stop.
func publishSteadily(n *brokertest.Names, rate int, stop <-chan struct{}, count *atomic.Int64) error {
	conn, err := broker.Dial(broker.Config{URL: brokertest.URL(), Name: "outage-producer"})
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		return err
	}
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		id := uuid.Must(uuid.NewV7()).String()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := pub.Publish(ctx, confirmedEvent(n, id, fmt.Sprint(900000+i)))
		cancel()
		if err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
		count.Add(1)
	}
}

// report logs one line every 5 s of what the dashboard shows.
func report(b *testing.B, samples []sample, restored, drained time.Duration, last sample) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%5s %-6s %6s %7s %6s %6s %6s %6s %7s %7s %8s %8s %6s %7s %9s\n", "t", "phase", "pub", "q.ready", "q.cons",
		"leader", "pend", "sent", "stats.s", "ingretr", "lag.p99", "dlv.p99", "ob.age", "ob.pend", "readyz")
	for i, s := range samples {
		if i%5 != 0 && i != len(samples)-1 {
			continue
		}
		prev := samples[max(0, i-10)]
		ready := "absent"
		if s.ready >= 0 {
			ready = strconv.Itoa(s.ready)
		}
		fmt.Fprintf(&sb, "%5s %-6s %6d %7s %6.0f %6.0f %6.0f %6.0f %7.0f %7.0f %8.1f %8.1f %6.0f %7.0f %9s\n",
			s.at, s.phase, s.publish, ready, s.m[`mailsvc_queue_consumers{queue="input"}`], s.m["mailsvc_relay_leader"],
			s.m[`mailsvc_mails{status="pending"}`], s.m[`mailsvc_mails{status="sent"}`], statsAge(s),
			s.m["mailsvc_ingest_retries_total"], quantile(.99, "mailsvc_event_lag_seconds", prev.m, s.m),
			quantile(.99, "mailsvc_delivery_lag_seconds", prev.m, s.m), s.m["mailsvc_outbox_oldest_age_seconds"],
			s.m["mailsvc_outbox_pending"], s.readyz)
	}
	fmt.Fprintf(&sb, "restored at %s; the backlog recorded and the input queue empty %s later; %d events, %d mails sent\n",
		restored, drained, last.publish, int(last.m[`mailsvc_send_attempts_total{outcome="sent",provider="smtp"}`]))
	fmt.Fprint(os.Stdout, sb.String()) // b.Log would truncate the table
}

// statsAge is how old the database gauges were when s was taken: the
// sample's own clock minus the last refresh.
func statsAge(s sample) float64 {
	return float64(s.wall.UnixNano())/1e9 - s.m["mailsvc_stats_last_refresh_timestamp_seconds"]
}

// checkOutage asserts what the dashboard must show.
func checkOutage(b *testing.B, samples []sample) {
	var outage []sample
	for _, s := range samples {
		if s.phase == "outage" {
			outage = append(outage, s)
		}
	}
	first, last := outage[0], outage[len(outage)-1]
	for _, s := range outage[10:] {
		require.NotEqual(b, -1, s.ready, "%s: the queue gauge stays exported through the outage", s.at)
		require.Equal(b, "503 database", s.readyz, "%s", s.at)
	}
	// The first amqp.prefetch (200) events of the outage wait unacknowledged
	// in the consumer, which a passive declare does not count.
	require.GreaterOrEqual(b, last.ready, 200, "the backlog shows on the broker's gauge")
	require.Equal(b, first.m[`mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="inserted"}`],
		last.m[`mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="inserted"}`], "nothing recorded during the outage")
	require.Greater(b, last.m["mailsvc_ingest_retries_total"], first.m["mailsvc_ingest_retries_total"])
	require.Greater(b, last.m["mailsvc_stats_refresh_errors_total"], first.m["mailsvc_stats_refresh_errors_total"])
	require.Equal(b, 0.0, last.m["mailsvc_relay_leader"], "the lease lives in the database")
	end := samples[len(samples)-1]
	require.Equal(b, "200", end.readyz)
	require.Equal(b, 1.0, end.m["mailsvc_relay_leader"])
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
