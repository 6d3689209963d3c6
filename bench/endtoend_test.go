package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"net/mail"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

const (
	// benchMails is how many events the full-speed run publishes.
	benchMails = 5000
	// benchRate (events/s) and benchSeconds make the paced latency run.
	benchRate    = 200
	benchSeconds = 10
	// benchRepeats is how many full-speed runs each system makes (each on
	// a fresh queue, schema and process); the best counts, since other
	// work on a shared machine only ever slows a run down.
	benchRepeats = 2
)

// benchSettings are the knobs one run uses: mailsvc gets them as its
// environment, the raw baseline takes the same concurrency from them.
type benchSettings struct {
	name        string
	workers     int           // sender.workers: SMTP connections
	sendBatch   int           // sender.batch_size: rows per claim
	prefetch    int           // amqp.prefetch: unacked deliveries held
	ingestBatch int           // amqp.batch_size: events per transaction
	poll        time.Duration // sender.poll_interval
	// padBytes is baseline only: filler added to each body, so that its
	// mails are as large as mailsvc's rendered ones.
	padBytes int
	// markPerRow is baseline only: one UPDATE per sent mail instead of
	// one per claimed batch.
	markPerRow bool
	// recordEach is baseline only: the least recording mailsvc's promise
	// asks (recorded_test.go): each mail's send marked started,
	// and its outcome recorded, before the worker's next send, the
	// workers' writes group-committed.
	recordEach bool
	// recordLog (with recordEach) appends the marks and outcomes to a
	// narrow log table and marks the mail rows sent per claimed batch.
	recordLog bool
	// render is baseline only: each mail is rendered from its event with
	// mailsvc's own templates (internal/templates), as mailsvc renders it,
	// instead of a one-line body, so that its content, size and
	// compression are mailsvc's.
	render bool
	// feedback (with recordLog) is baseline only: the statement that
	// marks a batch sent also writes one EmailSent per mail to the
	// floor's event queue, and a relay publishes them with confirms
	// (floor_test.go).
	feedback bool
}

var (
	// defaultSettings are internal/config/defaults.go's values
	// (TestBenchDefaultsAreTheConfigDefaults).
	defaultSettings = benchSettings{name: "defaults", workers: 8, sendBatch: 50, prefetch: 200, ingestBatch: 100, poll: time.Second}
	// markPerRowSettings are defaultSettings for a baseline that marks
	// each mail sent on its own.
	markPerRowSettings = benchSettings{name: "defaults-mark-per-row", workers: 8, sendBatch: 50, prefetch: 200, ingestBatch: 100,
		poll: time.Second, markPerRow: true}
	// recordedSettings are defaultSettings for a baseline that records
	// each mail as mailsvc's promise asks.
	recordedSettings = benchSettings{name: "defaults-recorded", workers: 8, sendBatch: 50, prefetch: 200, ingestBatch: 100,
		poll: time.Second, recordEach: true}
	// recordedLogSettings are recordedSettings with the recording kept in
	// a narrow append-only log.
	recordedLogSettings = benchSettings{name: "defaults-recorded-log", workers: 8, sendBatch: 50, prefetch: 200, ingestBatch: 100,
		poll: time.Second, recordEach: true, recordLog: true}
	// floorSettings are recordedLogSettings for the floor baseline
	// (floor_test.go), the job mailsvc does with nothing beyond its
	// promise and its contract: mailsvc's rendered mails, and one
	// EmailSent per mail queued with its batch's sent mark and published
	// with confirms.
	floorSettings = benchSettings{name: "defaults-floor", workers: 8, sendBatch: 50, prefetch: 200, ingestBatch: 100,
		poll: time.Second, render: true, recordEach: true, recordLog: true, feedback: true}
	// tunedSettings are the best measured here (docs/benchmarks.md): 16
	// workers, so that twice as many outcomes share a commit (for a relay
	// that allows 16 connections), a larger prefetch and ingest
	// transactions of 250 events.
	tunedSettings = benchSettings{name: "tuned", workers: 16, sendBatch: 50, prefetch: 1000, ingestBatch: 250, poll: time.Second}
	// bigMailSettings are tunedSettings for a baseline whose mails are as
	// large as mailsvc's (about 5.5 KB on the wire instead of 0.8 KB).
	bigMailSettings = benchSettings{name: "tuned-big-mails", workers: 16, sendBatch: 50, prefetch: 1000, ingestBatch: 250,
		poll: time.Second, padBytes: 1300}
)

// env is the settings as mailsvc environment overrides, plus any
// space-separated KEY=VALUE pairs in MAILSVC_BENCH_ENV (for trying more
// settings; it changes every mailsvc run, not the baseline).
func (s benchSettings) env() map[string]string {
	env := map[string]string{
		"MAILSVC_SENDER_WORKERS":       strconv.Itoa(s.workers),
		"MAILSVC_SENDER_BATCH_SIZE":    strconv.Itoa(s.sendBatch),
		"MAILSVC_AMQP_PREFETCH":        strconv.Itoa(s.prefetch),
		"MAILSVC_AMQP_BATCH_SIZE":      strconv.Itoa(s.ingestBatch),
		"MAILSVC_SENDER_POLL_INTERVAL": s.poll.String(),
	}
	for _, kv := range strings.Fields(os.Getenv("MAILSVC_BENCH_ENV")) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// system is one pipeline under test (mailsvc or the raw baseline), running
// in a process of its own on its own queue, schema and SMTP server.
type system struct {
	names *brokertest.Names
	smtp  *smtptest.Server
	pid   int             // the pipeline process
	done  <-chan struct{} // closed once that process exited
	logs  func() string   // its output so far
	// schema is the system's schema (the WAL position is read through it);
	// dbCounts, when set, reads the process's own statement and commit
	// counters (mailsvc's /metrics).
	schema   *storetest.Schema
	dbCounts func(b *testing.B) budget
	// settle waits until every one of n mails is recorded as sent and
	// asserts exact counts; stop then ends the pipeline (SIGTERM) and
	// fails the benchmark if it did not exit cleanly.
	settle func(b *testing.B, n int)
	stop   func(b *testing.B)
}

// starter starts a system; discard selects a discarding SMTP server.
type starter func(b *testing.B, set benchSettings, discard bool) *system

// benchResult is one system's figures; a ratio is 0 when not measured.
type benchResult struct {
	name        string
	mailsPerSec float64 // the best of benchRepeats full-speed runs
	ratio       float64 // mailsPerSec / the (mark-per-batch) baseline's with the same settings
	ratioBig    float64 // mailsPerSec / the big-mail baseline's
	// ratioFloor and cpuRatioFloor are mailsPerSec and cpuFull.total()
	// over the floor baseline's (mailsvc with the defaults only).
	ratioFloor, cpuRatioFloor float64
	// cpuFull (the mean of the full-speed runs) and cpuPaced (the run at
	// benchRate) are whole-pipeline CPU per mail.
	cpuFull, cpuPaced cpuUse
	// cpuRatioFull and cpuRatioPaced are cpuFull.total() and
	// cpuPaced.total() over the same baseline's.
	cpuRatioFull, cpuRatioPaced float64
	// costFull (the mean of the full-speed runs) and costPaced are the
	// budget's counts per mail.
	costFull, costPaced budget
	latency
}

// BenchmarkEndToEnd measures, in one invocation, the raw baseline (marking
// mails sent per batch, with the default, the tuned and the big-mail
// settings; with the defaults also per row, recording each send as
// mailsvc's promise asks (recorded_test.go), and as the floor
// (floor_test.go)) and mailsvc (a real `mailsvc serve` process) with
// the default and the tuned settings: events
// published to the real broker until the SMTP server on loopback accepted
// the mails. Each system does benchRepeats full-speed runs of benchMails
// events (the best mails/s counts) and a run paced at benchRate events/s
// for benchSeconds (latency from publish to SMTP acceptance, p50 and p99),
// each on a fresh queue, schema, SMTP server and pipeline process.
//
// The floor, baseline/defaults-floor, is a yardstick, not a design: the
// job mailsvc does, with nothing beyond what its promise and its contract
// ask, done the plainest way. It keeps the promise's two recording rules,
// mailsvc's own mails (rendered with its templates) and one EmailSent per
// mail, written in the transaction that records the mail sent and
// published with confirms; it still skips validation, fencing tokens,
// leases, cancels, retries, dead-lettering, the relay's per-order ordering
// and lease, tracing and metrics. mailsvc with the defaults is also
// reported over it (ratio_floor, cpu_ratio_floor).
//
// Every run also measures the whole pipeline's CPU per mail: the pipeline
// process (mailsvc serve, or the baseline's child process) plus PostgreSQL
// plus RabbitMQ, from /proc (cpuSnapshot), between a snapshot taken once
// the system is ready, before the first publish, and one taken once every
// mail is recorded sent (the counts checked), before the stop. The test
// process, which publishes and runs the SMTP server, is not counted; the
// part of PostgreSQL's in the pipeline's own backends is shown too. The
// full-speed figure is the mean of the runs. Before the runs, a window with
// no pipeline shows what the servers spend with nothing to do (other users
// of them included). b.N is ignored: one invocation takes about 3 minutes.
// Run it with
//
//	go test -run '^$' -bench EndToEnd -benchtime 1x -timeout 20m . (in bench/)
func BenchmarkEndToEnd(b *testing.B) {
	idle := measureIdle(b, idleWindow)
	var results []benchResult
	byName := map[string]benchResult{}
	floor := "baseline/" + floorSettings.name
	run := func(start starter, set benchSettings, system, baseline, bigBaseline string) {
		name := system + "/" + set.name
		b.Run(name, func(b *testing.B) {
			r := runSystem(b, name, start, set)
			if base, ok := byName[baseline]; ok {
				r.ratio = r.mailsPerSec / base.mailsPerSec
				r.cpuRatioFull = float64(r.cpuFull.total()) / float64(base.cpuFull.total())
				r.cpuRatioPaced = float64(r.cpuPaced.total()) / float64(base.cpuPaced.total())
			}
			if big, ok := byName[bigBaseline]; ok {
				r.ratioBig = r.mailsPerSec / big.mailsPerSec
			}
			if f, ok := byName[floor]; ok && system == "mailsvc" && set == defaultSettings {
				r.ratioFloor = r.mailsPerSec / f.mailsPerSec
				r.cpuRatioFloor = float64(r.cpuFull.total()) / float64(f.cpuFull.total())
			}
			reportResult(b, r)
			byName[name] = r
			results = append(results, r)
		})
	}
	run(startBaseline, defaultSettings, "baseline", "", "")
	run(startBaseline, markPerRowSettings, "baseline", "baseline/defaults", "")
	run(startBaseline, recordedSettings, "baseline", "baseline/defaults", "")
	run(startBaseline, recordedLogSettings, "baseline", "baseline/defaults", "")
	run(startBaseline, floorSettings, "baseline", "baseline/defaults", "")
	run(startMailsvc, defaultSettings, "mailsvc", "baseline/defaults", "")
	run(startBaseline, tunedSettings, "baseline", "", "")
	run(startBaseline, bigMailSettings, "baseline", "", "")
	run(startMailsvc, tunedSettings, "mailsvc", "baseline/tuned", "baseline/tuned-big-mails")
	// A parent benchmark's b.Log shows only with -v: print the table.
	fmt.Println(benchTable(results, idle))
}

// idleWindow is how long measureIdle watches the servers.
const idleWindow = 3 * time.Second

// measureIdle returns the CPU PostgreSQL and RabbitMQ spend per second over
// a window of d with no pipeline of this benchmark running.
func measureIdle(b *testing.B, d time.Duration) cpuUse {
	before := cpuSnapshot(b, 0)
	start := time.Now()
	<-time.After(d) // a measuring window, not a wait for anything
	used := cpuSnapshot(b, 0).since(before)
	perSec := float64(time.Second) / float64(time.Since(start))
	return cpuUse{postgres: time.Duration(float64(used.postgres) * perSec), rabbitmq: time.Duration(float64(used.rabbitmq) * perSec),
		steal: used.steal, machine: used.machine}
}

// runSystem makes benchRepeats full-speed runs (best rate, mean CPU) and
// one latency run, each on a freshly started system.
func runSystem(b *testing.B, name string, start starter, set benchSettings) benchResult {
	r := benchResult{name: name}
	for range benchRepeats {
		sys := start(b, set, true)
		mark := markBudget(b, sys, sys.schema)
		rate, cpu := measureThroughput(b, sys, benchMails)
		r.costFull = r.costFull.add(mark.since(b, sys, sys.schema, benchMails).scale(1.0 / benchRepeats))
		sys.stop(b)
		r.mailsPerSec = max(r.mailsPerSec, rate)
		r.cpuFull = r.cpuFull.add(cpu.div(benchMails * benchRepeats))
	}
	sys := start(b, set, false)
	var cpu cpuUse
	mark := markBudget(b, sys, sys.schema)
	r.latency, cpu = measureLatency(b, sys, benchRate, benchSeconds)
	r.costPaced = mark.since(b, sys, sys.schema, benchRate*benchSeconds)
	sys.stop(b)
	r.cpuPaced = cpu.div(benchRate * benchSeconds)
	return r
}

func reportResult(b *testing.B, r benchResult) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(r.mailsPerSec, "mails/s")
	b.ReportMetric(ms(r.p50), "p50_ms")
	b.ReportMetric(ms(r.p99), "p99_ms")
	b.ReportMetric(us(r.cpuFull.total()), "cpu_µs/mail")
	b.ReportMetric(us(r.cpuPaced.total()), "cpu_paced_µs/mail")
	if r.ratio > 0 {
		b.ReportMetric(r.ratio, "ratio")
		b.ReportMetric(r.cpuRatioFull, "cpu_ratio")
		b.ReportMetric(r.cpuRatioPaced, "cpu_paced_ratio")
	}
	if r.ratioBig > 0 {
		b.ReportMetric(r.ratioBig, "ratio_big_mails")
	}
	if r.ratioFloor > 0 {
		b.ReportMetric(r.ratioFloor, "ratio_floor")
		b.ReportMetric(r.cpuRatioFloor, "cpu_ratio_floor")
	}
}

// benchTable formats the results: throughput and latency, then CPU per
// mail. ratio is a run's rate over the mark-per-batch baseline's with the
// same settings (for mailsvc's runs and the other baselines with the
// defaults), ratio-big over the big-mail baseline's, floor (mailsvc with
// the defaults) over the floor baseline's; a CPU ratio is a run's
// whole-pipeline CPU per mail over that same baseline's.
func benchTable(rs []benchResult, idle cpuUse) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-30s %8s %6s %9s %6s %12s %7s %7s %7s %10s\n", "system", "mails/s", "ratio", "ratio-big", "floor",
		"offered ev/s", "p50 ms", "p99 ms", "max ms", "bytes/mail")
	for _, r := range rs {
		fmt.Fprintf(&sb, "%-30s %8.0f %6s %9s %6s %12.0f %7.1f %7.1f %7.1f %10d\n", r.name, r.mailsPerSec,
			orDash("%.2f", r.ratio), orDash("%.2f", r.ratioBig), orDash("%.2f", r.ratioFloor), r.offered,
			ms(r.p50), ms(r.p99), ms(r.max), r.mailBytes)
	}
	fmt.Fprintf(&sb, "\nwhole-pipeline CPU per mail (µs): %-34s %s\n", "full speed", fmt.Sprintf("%d ev/s", benchRate))
	cols := fmt.Sprintf("%7s %6s %6s %6s %6s %6s %6s", "total", "pg", "pg-own", "mq", "proc", "ratio", "steal")
	fmt.Fprintf(&sb, "%-30s %s %6s | %s\n", "system", cols, "floor", cols)
	for _, r := range rs {
		fmt.Fprintf(&sb, "%-30s %s %6s | %s\n", r.name, cpuCols(r.cpuFull, r.cpuRatioFull), orDash("%.2f", r.cpuRatioFloor),
			cpuCols(r.cpuPaced, r.cpuRatioPaced))
	}
	fmt.Fprintf(&sb, "\nbudget per mail: %-19s %s\n", "full speed", fmt.Sprintf("%d ev/s", benchRate))
	bcols := fmt.Sprintf("%6s %6s %7s", "stmts", "commit", "WAL B")
	fmt.Fprintf(&sb, "%-30s %s | %s\n", "system", bcols, bcols)
	for _, r := range rs {
		fmt.Fprintf(&sb, "%-30s %s | %s\n", r.name, budgetCols(r.costFull), budgetCols(r.costPaced))
	}
	fmt.Fprintf(&sb, "%-30s %s | %s\n", "goal (mailsvc/defaults)", budgetCols(budgetGoals.full), budgetCols(budgetGoals.paced))
	fmt.Fprintf(&sb, "stmts, commit: counted by the pipeline process itself (mailsvc_db_statements_total, mailsvc_db_commits_total; "+
		"'-' where a baseline does not count); WAL: the server's, from pg_current_wal_lsn, other users of the server included\n")
	fmt.Fprintf(&sb, "full speed: %d events (best mails/s, mean CPU of %d runs); latency: %d events/s for %d s\n",
		benchMails, benchRepeats, benchRate, benchSeconds)
	fmt.Fprintf(&sb, "ratio, cpu ratio: over the mark-per-batch baseline with the same settings\n")
	fmt.Fprintf(&sb, "floor: mailsvc/defaults over baseline/defaults-floor, the least work that keeps mailsvc's promise and "+
		"contract (the recorded-log baseline with mailsvc's rendered mails and one EmailSent per mail through a transactional queue, "+
		"published with confirms; no validation, fencing, leases, cancels, retries or relay ordering)\n")
	fmt.Fprintf(&sb, "CPU from /proc between ready and settled; proc = the pipeline process; "+
		"pg-own = the part of pg in the backends of the pipeline's connections; %s; "+
		"idle, the servers used PostgreSQL %.1f ms/s, RabbitMQ %.1f ms/s\n", findServers().how, ms(idle.postgres), ms(idle.rabbitmq))
	fmt.Fprintf(&sb, "steal: the machine's CPU time its hypervisor gave to other guests during the runs (/proc/stat, all cores; "+
		"%.0f %% while idle); '!' above %.0f %%: that row's CPU figures are not comparable with a quiet run's\n",
		100*idle.stealShare(), 100*stealSpoils)
	fmt.Fprintf(&sb, "goals: throughput ratio >= 0.8; whole-pipeline CPU per mail <= 1.3x baseline at full speed and at "+
		"%d ev/s; p99 <= 15 ms at %d ev/s; serve peak RSS <= 100 MB draining 100,000 mails (BenchmarkBacklog)", benchRate, benchRate)
	return sb.String()
}

// cpuCols formats CPU per mail in µs: total, PostgreSQL, the part of it
// in the pipeline's own backends, RabbitMQ, the pipeline process, and the
// ratio of the total to the baseline's.
func cpuCols(c cpuUse, ratio float64) string {
	return fmt.Sprintf("%7.0f %6.0f %6.0f %6.0f %6.0f %6s %6s", us(c.total()), us(c.postgres), us(c.postgresOwn), us(c.rabbitmq),
		us(c.pipeline), orDash("%.2f", ratio), stealCol(c))
}

// stealCol formats c's stolen share in percent, marked with a "!" above
// stealSpoils (its CPU figures are not comparable with a quiet run's).
func stealCol(c cpuUse) string {
	share := c.stealShare()
	if share > stealSpoils {
		return fmt.Sprintf("%.0f%%!", 100*share)
	}
	return fmt.Sprintf("%.0f%%", 100*share)
}

// orDash formats v, or "-" when it is 0 (not measured).
func orDash(format string, v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// benchBodies builds the events for order ids 1..n (half vi, half en).
func benchBodies(b *testing.B, n int) [][]byte {
	bodies := make([][]byte, n)
	for i := range bodies {
		ev := e2etest.Confirmed(i+1, map[bool]string{true: "vi", false: "en"}[i%2 == 0])
		body, err := json.Marshal(ev)
		require.NoError(b, err)
		bodies[i] = body
	}
	return bodies
}

// benchPublisher publishes with deferred confirms, checked at the end.
type benchPublisher struct {
	*e2etest.Publisher
	confs []*amqp.DeferredConfirmation
}

func newBenchPublisher(b *testing.B, n *brokertest.Names) *benchPublisher {
	return &benchPublisher{Publisher: e2etest.NewPublisher(b, n)}
}

func (p *benchPublisher) publishBody(b *testing.B, body []byte) {
	var ev struct {
		EventID string `json:"event_id"`
	}
	require.NoError(b, json.Unmarshal(body, &ev))
	c, err := p.Ch.PublishWithDeferredConfirmWithContext(context.Background(), p.Ex, "order.confirmed", false, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: ev.EventID, Type: "OrderConfirmed", Body: body,
	})
	require.NoError(b, err)
	p.confs = append(p.confs, c)
}

// confirmAll waits until the broker confirmed every publish.
func (p *benchPublisher) confirmAll(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range p.confs {
		ok, err := c.WaitContext(ctx)
		require.NoError(b, err)
		require.True(b, ok, "broker nacked a bench event")
	}
}

// waitCount waits until the system's SMTP server took n messages; it fails
// the benchmark after within, or as soon as the pipeline process exited.
func waitCount(b *testing.B, sys *system, n int, within time.Duration) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(within)
	for sys.smtp.Count() < n {
		if time.Now().After(deadline) {
			b.Fatalf("SMTP server took %d mails within %s, want %d", sys.smtp.Count(), within, n)
		}
		select {
		case <-sys.done:
			b.Fatalf("the pipeline process exited after %d of %d mails:\n%s", sys.smtp.Count(), n, sys.logs())
		case <-tick.C:
		}
	}
}

// measureThroughput publishes n events as fast as the broker confirms them
// and returns mails/s from the first publish to the n-th SMTP acceptance,
// and the whole pipeline's CPU from just before the first publish until
// the system settled.
func measureThroughput(b *testing.B, sys *system, n int) (float64, cpuUse) {
	bodies := benchBodies(b, n)
	pub := newBenchPublisher(b, sys.names)
	before := cpuSnapshot(b, sys.pid)
	start := time.Now()
	for _, body := range bodies {
		pub.publishBody(b, body)
	}
	waitCount(b, sys, n, 2*time.Minute)
	elapsed := time.Since(start)
	pub.confirmAll(b)
	sys.settle(b, n)
	return float64(n) / elapsed.Seconds(), cpuSnapshot(b, sys.pid).since(before)
}

// latency is what the paced run measured.
type latency struct {
	offered       float64 // events/s actually published
	p50, p99, max time.Duration
	mailBytes     int // mean size of a message as the SMTP server took it
}

// measureLatency publishes rate events/s for secs seconds and returns the
// distribution of publish -> SMTP acceptance, matched by X-Dedupe-Key, and
// the whole pipeline's CPU from just before the first publish until the
// system settled.
func measureLatency(b *testing.B, sys *system, rate, secs int) (latency, cpuUse) {
	total := rate * secs
	bodies := benchBodies(b, total)
	pub := newBenchPublisher(b, sys.names)
	sent := make([]time.Time, total+1) // by order id
	before := cpuSnapshot(b, sys.pid)
	tick := time.NewTicker(time.Millisecond)
	start := time.Now()
	for i := 0; i < total; {
		// Publish what is due by now, then wait for the next tick: a late
		// tick is made up for, so the rate holds on a busy machine.
		due := min(total, 1+int(time.Since(start).Seconds()*float64(rate)))
		for ; i < due; i++ {
			sent[i+1] = time.Now()
			pub.publishBody(b, bodies[i])
		}
		<-tick.C
	}
	tick.Stop()
	offered := float64(total) / sent[total].Sub(start).Seconds()
	waitCount(b, sys, total, time.Minute)
	pub.confirmAll(b)
	lat := make([]time.Duration, 0, total)
	size := 0
	for _, m := range sys.smtp.Messages() {
		lat = append(lat, m.At.Sub(sent[orderID(b, m.Data)]))
		size += len(m.Data)
	}
	require.Len(b, lat, total)
	sys.settle(b, total)
	used := cpuSnapshot(b, sys.pid).since(before)
	slices.Sort(lat)
	return latency{offered: offered, p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], max: lat[len(lat)-1],
		mailBytes: size / total}, used
}

// orderID reads the order id from a message's X-Dedupe-Key header
// ("order-confirmed:ID").
func orderID(b *testing.B, data []byte) int {
	m, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(b, err)
	key := m.Header.Get("X-Dedupe-Key")
	id, err := strconv.Atoi(strings.TrimPrefix(key, "order-confirmed:"))
	require.NoError(b, err, "X-Dedupe-Key %q", key)
	return id
}

// startMailsvc starts `mailsvc serve` on a fresh stack (newMailsvcStack)
// with the settings.
func startMailsvc(b *testing.B, set benchSettings, discard bool) *system {
	return newMailsvcStack(b, discard).start(b, set)
}

// mailsvcStack is a fresh stack for mailsvc serve, with its SMTP server
// and a queue that counts its EmailSent feedback events.
type mailsvcStack struct {
	*e2etest.Stack
	srv        *smtptest.Server
	sentEvents *atomic.Int64
}

func newMailsvcStack(b *testing.B, discard bool) *mailsvcStack {
	srv := smtptest.New(b, smtptest.Options{Discard: discard})
	s := e2etest.NewStack(b, srv.Addr)
	fb := e2etest.NewFeedbackQueue(b, s.Names)
	var sentEvents atomic.Int64
	go func() {
		for d := range fb.Out {
			if d.RoutingKey == "email.sent" {
				sentEvents.Add(1)
			}
		}
	}()
	e2etest.NewPublisher(b, s.Names) // declares the input exchange before serve
	return &mailsvcStack{Stack: s, srv: srv, sentEvents: &sentEvents}
}

// start starts `mailsvc serve` with the settings; settle waits up to a
// minute, plus a millisecond per mail, for the EmailSent events.
func (s *mailsvcStack) start(b *testing.B, set benchSettings) *system {
	p := s.Serve(set.env())
	sys := &system{names: s.Names, smtp: s.srv, pid: p.Cmd.Process.Pid, done: p.Done, logs: p.Logs.String, schema: s.Schema,
		dbCounts: func(b *testing.B) budget { return servesDBCounts(b, p.Metrics(b)) }}
	sys.stop = func(b *testing.B) {
		p.Stop(b, 30*time.Second)
		if st := p.Cmd.ProcessState; st != nil && !st.Success() {
			b.Errorf("mailsvc serve: %v:\n%s", st, p.Logs.String())
		}
	}
	sys.settle = func(b *testing.B, n int) {
		within := time.Minute + time.Duration(n)*time.Millisecond
		require.Eventually(b, func() bool { return s.sentEvents.Load() >= int64(n) }, within, 10*time.Millisecond,
			"EmailSent events, want %d", n)
		require.Equal(b, n, s.srv.Count(), "SMTP deliveries")
		require.Equal(b, int64(n), s.Schema.QueryInt(b, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 1`))
		require.Equal(b, int64(n), s.sentEvents.Load(), "EmailSent events")
		// The relay's published marks are part of each mail's cost.
		require.Eventually(b, func() bool {
			return s.Schema.QueryInt(b, `SELECT count(*) FROM outbox WHERE published_at IS NULL`) == 0
		}, time.Minute, 10*time.Millisecond, "outbox rows marked published")
	}
	return sys
}
