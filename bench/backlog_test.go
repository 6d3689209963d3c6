package bench

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// backlogMails is how many events BenchmarkBacklog queues up, unless
// MAILSVC_BENCH_BACKLOG says otherwise.
const backlogMails = 100_000

// BenchmarkBacklog measures `mailsvc serve` with the default settings
// draining a backlog: it starts serve once so that it declares its queue,
// stops it (SIGTERM), publishes the events with confirms (order ids 1..n,
// as BenchmarkEndToEnd's), then starts serve again against a discarding
// SMTP server and waits until every mail was delivered and recorded sent
// (exact counts: n SMTP deliveries, n rows sent with one attempt, n
// EmailSent events). It reports
//   - peak RSS: the serve process's VmHWM (/proc/<pid>/status) once it
//     drained the backlog, in MB (10^6 bytes);
//   - drain mails/s: n over the time from the start of the second serve to
//     the n-th SMTP acceptance (its start-up included);
//   - whole-pipeline CPU per mail: the serve process's CPU over its life,
//     plus PostgreSQL's and RabbitMQ's from just before it started until
//     the counts matched (cpuSnapshot), and the part of PostgreSQL's in
//     serve's own backends (pg-own).
//
// n is backlogMails, or MAILSVC_BENCH_BACKLOG (for example 20000 for a
// quick run). b.N is ignored; with 100,000 events it takes a few minutes:
//
//	go test -run '^$' -bench Backlog -benchtime 1x -timeout 30m . (in bench/)
func BenchmarkBacklog(b *testing.B) {
	n := backlogMails
	if v := os.Getenv("MAILSVC_BENCH_BACKLOG"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err, "MAILSVC_BENCH_BACKLOG")
		require.Positive(b, n, "MAILSVC_BENCH_BACKLOG")
	}
	s := newMailsvcStack(b, true)
	set := defaultSettings
	first := s.Serve(set.env())
	first.Stop(b, 30*time.Second)
	require.True(b, first.Cmd.ProcessState.Success(), "first mailsvc serve: %v:\n%s", first.Cmd.ProcessState, first.Logs.String())

	publishBacklog(b, s, n)

	before := cpuSnapshot(b, 0)
	start := time.Now()
	sys := s.start(b, set)
	waitCount(b, sys, n, time.Minute+time.Duration(n)*10*time.Millisecond)
	elapsed := time.Since(start)
	sys.settle(b, n)
	used := cpuSnapshot(b, sys.pid).since(before)
	rss := peakRSS(b, sys.pid)
	sys.stop(b)

	perMail := used.div(n)
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(rss)/1e6, "peak_rss_MB")
	b.ReportMetric(rate, "drain_mails/s")
	b.ReportMetric(us(perMail.total()), "cpu_µs/mail")
	fmt.Printf("%-18s %8s %13s %11s | %s\n", "system", "mails", "drain mails/s", "peak RSS MB",
		fmt.Sprintf("%7s %6s %6s %6s %6s %6s", "cpu µs/mail", "pg", "pg-own", "mq", "proc", "steal"))
	fmt.Printf("%-18s %8d %13.0f %11.1f | %11.0f %6.0f %6.0f %6.0f %6.0f %6s\n", "mailsvc/"+set.name, n, rate, float64(rss)/1e6,
		us(perMail.total()), us(perMail.postgres), us(perMail.postgresOwn), us(perMail.rabbitmq), us(perMail.pipeline),
		stealCol(perMail))
	fmt.Printf("peak RSS: VmHWM of mailsvc serve; cpu from /proc: PostgreSQL + RabbitMQ + mailsvc serve (proc); "+
		"pg-own = the part of pg in mailsvc's own backends; %s; "+
		"steal: the machine's CPU time its hypervisor gave to other guests (/proc/stat), '!' above %.0f %%: not comparable\n",
		findServers().how, 100*stealSpoils)
	fmt.Printf("goal: serve peak RSS <= 100 MB draining 100,000 mails\n")
}

// publishBacklog publishes n events to the stack's input exchange and waits
// for the broker's confirms; the bodies are garbage once it returns.
func publishBacklog(b *testing.B, s *mailsvcStack, n int) {
	bodies := benchBodies(b, n)
	pub := newBenchPublisher(b, s.Names)
	for i, body := range bodies {
		pub.publishBody(b, body)
		bodies[i] = nil
	}
	pub.confirmAll(b)
	require.NoError(b, pub.Conn.Close())
}
