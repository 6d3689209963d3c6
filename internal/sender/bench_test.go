package sender_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// benchMails is how many pending rows one throughput run drains.
const benchMails = 10000

// BenchmarkSend measures mails/s from benchMails pending rows to a
// discarding SMTP server on loopback, through the pool (claim, send,
// fenced write with its outbox row) with the default batch size (10) and
// with 50, and, in the same run, through a raw go-mail loop with the same
// concurrency and no database: the ceiling the pool is compared to.
func BenchmarkSend(b *testing.B) {
	for _, workers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("raw/workers=%d", workers), func(b *testing.B) { benchRaw(b, workers) })
		for _, batch := range []int{10, 50} {
			b.Run(fmt.Sprintf("pool/workers=%d/batch=%d", workers, batch), func(b *testing.B) { benchPool(b, workers, batch) })
		}
	}
}

func benchPool(b *testing.B, workers, batch int) {
	srv := smtptest.New(b, smtptest.Options{Discard: true})
	prov, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLS: smtp.TLSNone, HELO: "bench.local"})
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += poolRun(b, prov, workers, batch)
	}
	b.ReportMetric(float64(benchMails*b.N)/total.Seconds(), "mails/s")
}

// poolRun seeds the rows (untimed), then times one pool draining them.
func poolRun(b *testing.B, prov sender.Provider, workers, batch int) time.Duration {
	b.StopTimer()
	sc := storetest.New(b)
	ctx := context.Background()
	if err := storetest.Seed(ctx, sc.Store, "bench-", mailtype.StatusPending, benchMails); err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(ctx, store.Options{URL: sc.URL, MaxConns: int32(workers + 4)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m := sender.NewMetrics(nil)
	wrote := make(chan struct{}, 1)
	cfg := sender.Config{Workers: workers, BatchSize: batch, From: from, WorkerID: "bench", PollInterval: 10 * time.Millisecond}
	p, err := sender.New(cfg, sender.Deps{Store: st, Provider: prov, Metrics: m, OnOutboxWritten: func() {
		select {
		case wrote <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	// Sent outcomes are counted when their transaction committed.
	for value(m.Attempts.WithLabelValues("smtp", sender.OutcomeSent)) < benchMails {
		<-wrote
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := p.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if n := sc.QueryInt(b, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 1`); n != benchMails {
		b.Fatalf("%d mails sent, want %d", n, benchMails)
	}
	return elapsed
}

func benchRaw(b *testing.B, workers int) {
	srv := smtptest.New(b, smtptest.Options{Discard: true})
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += rawRun(b, srv, workers)
	}
	b.ReportMetric(float64(benchMails*b.N)/total.Seconds(), "mails/s")
}

// rawRun sends benchMails with `workers` goroutines, each on its own
// go-mail connection, building each message as the provider does.
func rawRun(b *testing.B, srv *smtptest.Server, workers int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			c, err := gomail.NewClient(srv.Host, gomail.WithPort(srv.Port), gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithHELO("bench.local"))
			if err != nil {
				b.Error(err)
				return
			}
			if err := c.DialWithContext(context.Background()); err != nil {
				b.Error(err)
				return
			}
			defer func() { _ = c.Close() }()
			for n := next.Add(1); n <= benchMails; n = next.Add(1) {
				if err := c.Send(rawMsg(b, int(n))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func rawMsg(b *testing.B, n int) *gomail.Msg {
	key := fmt.Sprintf("raw-%d", n)
	m := gomail.NewMsg(gomail.WithBoundary("mailsvc-"+key), gomail.WithNoDefaultUserAgent())
	if err := m.From(from); err != nil {
		b.Fatal(err)
	}
	if err := m.AddToFormat("Nguyễn Văn B", fmt.Sprintf("customer%d@example.com", n)); err != nil {
		b.Fatal(err)
	}
	m.Subject(fmt.Sprintf("Xác nhận đơn hàng %d", n))
	m.SetMessageIDWithValue(key + "@example.com")
	m.SetDateWithValue(time.Now().UTC())
	m.SetGenHeader(sender.DedupeHeader, key)
	m.SetBodyString(gomail.TypeTextPlain, fmt.Sprintf("Cảm ơn quý khách. Đơn hàng %d đã được xác nhận.\n", n))
	m.AddAlternativeString(gomail.TypeTextHTML, fmt.Sprintf("<p>Cảm ơn quý khách. Đơn hàng %d đã được xác nhận.</p>", n))
	return m
}

// BenchmarkClaim measures the claim statement (10 rows) with 10,000 due
// pending rows beside 0 or 1,000,000 sent rows, and beside a suppression
// list of 100,000 addresses; the claim cost must grow with neither. Each
// claim runs in a transaction that is rolled back, so the queue stays the
// same. It logs the plan.
func BenchmarkClaim(b *testing.B) {
	for _, sent := range []int{0, 1000000} {
		b.Run(fmt.Sprintf("sent=%d", sent), func(b *testing.B) { benchClaim(b, sent, 0) })
	}
	b.Run("suppressed=100000", func(b *testing.B) { benchClaim(b, 0, 100000) })
}

func benchClaim(b *testing.B, sent, suppressed int) {
	const claims = 2000
	sc := storetest.New(b)
	ctx := context.Background()
	if suppressed > 0 {
		// Every fifth pending row's recipient (customer5@, customer10@, ...).
		sc.Exec(b, `INSERT INTO suppression (address, reason, source)
SELECT 'customer' || (g * 5) || '@example.com', 'bench', 'operator' FROM generate_series(1, $1::int) g`, suppressed)
	}
	if sent > 0 {
		if err := storetest.Seed(ctx, sc.Store, "sent-", mailtype.StatusSent, sent); err != nil {
			b.Fatal(err)
		}
	}
	if err := storetest.Seed(ctx, sc.Store, "pending-", mailtype.StatusPending, benchMails); err != nil {
		b.Fatal(err)
	}
	if err := storetest.Analyze(ctx, sc.Store); err != nil {
		b.Fatal(err)
	}
	p := store.ClaimParams{Limit: 10, Lease: time.Minute, Worker: "bench"}
	plan, err := storetest.ExplainClaim(ctx, sc.Store, p)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("claim plan with %d sent rows:\n%s", sent, plan)
	lat := make([]time.Duration, 0, claims*b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range claims {
			t0 := time.Now()
			n, err := storetest.ClaimRollback(ctx, sc.Store, p)
			lat = append(lat, time.Since(t0))
			if err != nil || n != 10 {
				b.Fatalf("claim took %d rows: %v", n, err)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(lat)), "µs/claim")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
