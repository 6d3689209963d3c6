package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// countAllSQL is the mail part of the stats query before migration 00100:
// a count of the whole table by status (index-only on mail_status_idx).
const countAllSQL = `SELECT COALESCE(json_object_agg(status, n), '{}') FROM (SELECT status, count(*) AS n FROM mail GROUP BY status) c`

// BenchmarkStats times the stats query on 1,000,000 sent mails and
// 1,000,000 published outbox rows beside a small work queue (100 pending,
// 10 unknown): right after the fold of the million deltas the seeding
// wrote (their dead rows still in mail_status_delta, as until autovacuum
// after a burst), then once vacuumed (the steady state); and, for
// comparison, the whole-table count by status it replaced (on the index
// that served it). With -v it logs the plans with EXPLAIN (ANALYZE,
// BUFFERS):
//
//	go test -run '^$' -bench Stats -benchtime 50x -v ./internal/store/
func BenchmarkStats(b *testing.B) {
	sc := storetest.New(b)
	ctx := context.Background()
	const finished = 1_000_000
	if err := storetest.Seed(ctx, sc.Store, "sent-", mailtype.StatusSent, finished); err != nil {
		b.Fatal(err)
	}
	if err := storetest.Seed(ctx, sc.Store, "pending-", mailtype.StatusPending, 100); err != nil {
		b.Fatal(err)
	}
	sc.Exec(b, `UPDATE mail SET status = 'unknown' WHERE dedupe_key IN (SELECT 'pending-' || g FROM generate_series(1, 10) g)`)
	sc.Exec(b, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, payload, published_at)
		SELECT gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '{}', now() FROM generate_series(1, $1::int)`, finished)
	sc.Exec(b, `VACUUM ANALYZE mail`)
	sc.Exec(b, `VACUUM ANALYZE outbox`)
	if _, err := sc.Store.CompactStatusCounts(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := sc.Store.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st.Mails[mailtype.StatusSent] != finished || st.Mails[mailtype.StatusPending] != 90 || st.Mails[mailtype.StatusUnknown] != 10 {
		b.Fatalf("stats %v", st.Mails)
	}
	query := func(b *testing.B) {
		for b.Loop() {
			if _, err := sc.Store.Stats(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("stats query, 1M deltas just folded:\n%s", strings.Join(sc.QueryStrings(b, `EXPLAIN (ANALYZE, BUFFERS) `+store.StatsSQL, store.StatsArgs(store.DeliveryConfirm{Providers: []string{"resend"}, After: time.Hour})...), "\n"))
	b.Run("counters-1M-deltas-just-folded", query)
	sc.Exec(b, `VACUUM mail_status_delta`)
	b.Logf("stats query, steady state:\n%s", strings.Join(sc.QueryStrings(b, `EXPLAIN (ANALYZE, BUFFERS) `+store.StatsSQL, store.StatsArgs(store.DeliveryConfirm{Providers: []string{"resend"}, After: time.Hour})...), "\n"))
	b.Run("counters", query)
	sc.Exec(b, `CREATE INDEX mail_status_idx ON mail (status)`)
	sc.Exec(b, `VACUUM ANALYZE mail`)
	b.Logf("count of the whole table by status (before 00100):\n%s", strings.Join(sc.QueryStrings(b, `EXPLAIN (ANALYZE, BUFFERS) `+countAllSQL), "\n"))
	b.Run("count-all-before-00100", func(b *testing.B) {
		for b.Loop() {
			if n, err := sc.Store.ExecForTest(ctx, countAllSQL); err != nil || n != 1 {
				b.Fatal(n, err)
			}
		}
	})
}

// BenchmarkHotPathWrites measures what migration 00100 (the counters'
// triggers, mail_active_idx and mail_failed_idx in place of
// mail_status_idx) adds to the writes of the hot path, on the server's
// clock: each iteration runs one statement with EXPLAIN (ANALYZE) in a
// schema migrated up to date and in one migrated down to 00080, in turns
// and in alternating order, so that the load of a shared machine and the
// warmth of caches fall on both alike,
// and reports the mean execution time of each (triggers included). The
// statements: an outcome write moving rows=1, 10 or 50 mails between
// sending and sent through the primary key, a lease renewal of as many
// (no status change), and an ingest insert of as many pending mails.
//
//	go test -run '^$' -bench HotPathWrites -benchtime 2000x ./internal/store/
func BenchmarkHotPathWrites(b *testing.B) {
	ctx := context.Background()
	after, before := storetest.New(b), storetest.New(b)
	migrateDownThrough(b, before, 100)
	conns := map[string]*pgx.Conn{}
	for name, sc := range map[string]*storetest.Schema{"after": after, "before": before} {
		if err := storetest.Seed(ctx, sc.Store, "m-", mailtype.StatusPending, 10_000); err != nil {
			b.Fatal(err)
		}
		sc.Exec(b, `UPDATE mail SET status = 'sending', locked_until = now() + interval '1 minute'`)
		sc.Exec(b, `VACUUM ANALYZE mail`)
		c, err := pgx.Connect(ctx, sc.URL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(ctx) })
		conns[name] = c
	}
	writes := map[string]string{
		"finish": `UPDATE mail SET status = CASE WHEN status = 'sent' THEN 'sending' ELSE 'sent' END,
			locked_until = now() + interval '1 minute', updated_at = now() WHERE id = ANY ($1::bigint[])`,
		"renew": `UPDATE mail SET locked_until = now() + interval '1 minute', updated_at = now() WHERE id = ANY ($1::bigint[])`,
		"ingest": `INSERT INTO mail (dedupe_key, order_id, template, status)
			SELECT 'i-' || k, k::text, 'order_confirmed', 'pending' FROM unnest($1::bigint[]) k`,
	}
	var key int64
	for _, kind := range []string{"finish", "renew", "ingest"} {
		for _, rows := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/rows=%d", kind, rows), func(b *testing.B) {
				ids := make([]int64, rows)
				sum := map[string]float64{}
				var trig float64
				for b.Loop() {
					for i := range ids {
						key++
						ids[i] = key%10_000 + 1
						if kind == "ingest" {
							ids[i] = key
						}
					}
					order := []string{"after", "before"}
					if key%2 == 0 {
						order[0], order[1] = order[1], order[0]
					}
					for _, name := range order {
						exec, tr := explainMS(b, conns[name], writes[kind], ids)
						sum[name] += exec
						if name == "after" {
							trig += tr
						}
					}
				}
				n := float64(b.N)
				b.ReportMetric(1000*sum["before"]/n, "before-µs/stmt")
				b.ReportMetric(1000*sum["after"]/n, "after-µs/stmt")
				b.ReportMetric(1000*(sum["after"]-sum["before"])/n, "added-µs/stmt")
				b.ReportMetric(1000*trig/n, "trigger-µs/stmt")
			})
		}
	}
}

// explainMS runs q with EXPLAIN (ANALYZE) on c and returns its execution
// time in milliseconds, which includes the time of the triggers it fired,
// and the time of those triggers alone.
func explainMS(b *testing.B, c *pgx.Conn, q string, args ...any) (exec, triggers float64) {
	b.Helper()
	var out []struct {
		ExecutionTime float64 `json:"Execution Time"`
		Triggers      []struct {
			Time float64 `json:"Time"`
		} `json:"Triggers"`
	}
	if err := c.QueryRow(context.Background(), `EXPLAIN (ANALYZE, FORMAT JSON) `+q, args...).Scan(&out); err != nil || len(out) != 1 {
		b.Fatal(err, out)
	}
	for _, t := range out[0].Triggers {
		triggers += t.Time
	}
	return out[0].ExecutionTime, triggers
}
