package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// searchWrites are the hot path's writes BenchmarkSearchIndexWrites
// times: each moves the mails $1 from the status of reset to the next
// one; reset (not timed) moves them back.
var searchWrites = []struct{ name, write, reset string }{
	{"ingest", `INSERT INTO mail (event_id, dedupe_key, order_id, template, to_email, status)
		SELECT gen_random_uuid(), 'i-' || k || '-' || clock_timestamp(), k::text, 'order_confirmed', 'c' || k || '@example.com', 'pending'
		FROM unnest($1::bigint[]) k`, ""},
	{"claim", `UPDATE mail SET status = 'sending', attempts = attempts + 1, locked_until = now() + interval '1 minute',
		locked_by = 'w', updated_at = now() WHERE id = ANY ($1::bigint[])`,
		`UPDATE mail SET status = 'pending', locked_until = NULL WHERE id = ANY ($1::bigint[])`},
	{"sent-first-send", `UPDATE mail SET status = 'sent', sends = 1, sent_at = now(), provider = 'resend',
		provider_message_id = 'em_' || id, locked_until = NULL, updated_at = now() WHERE id = ANY ($1::bigint[])`,
		`UPDATE mail SET status = 'sending', locked_until = now() + interval '1 minute' WHERE id = ANY ($1::bigint[])`},
	{"retry", `UPDATE mail SET status = 'pending', sends = 2, provider = 'smtp', last_error = 'deferred: 451 try later',
		last_error_class = 'transient', locked_until = NULL, updated_at = now() WHERE id = ANY ($1::bigint[])`,
		`UPDATE mail SET status = 'sending', locked_until = now() + interval '1 minute' WHERE id = ANY ($1::bigint[])`},
}

// BenchmarkSearchIndexWrites measures what migrations 00240 (the search
// indexes) and 00250 (mail_attempt and its trigger) add to the writes of
// the hot path, on the server's clock, as BenchmarkHotPathWrites does for
// migration 00100: each iteration runs one write with EXPLAIN (ANALYZE,
// WAL) in a schema migrated up to date and in one migrated down to before
// 00240, in turns and in alternating order, and reports the mean
// execution time and WAL bytes of each (the statement's own writes: the
// rows of AFTER triggers are not in EXPLAIN's WAL figures, their time
// is). The writes: an ingest insert, a claim, a first send's sent outcome
// (the happy path: no attempt row) and a retry (an attempt row), of 1 or
// 10 mails each.
//
//	go test -run '^$' -bench SearchIndexWrites -benchtime 2000x ./internal/store/
func BenchmarkSearchIndexWrites(b *testing.B) {
	ctx := context.Background()
	after, before := storetest.New(b), storetest.New(b)
	migrateDownThrough(b, before, 240)
	conns := map[string]*pgx.Conn{}
	for name, sc := range map[string]*storetest.Schema{"after": after, "before": before} {
		if err := storetest.Seed(ctx, sc.Store, "m-", mailtype.StatusPending, 10_000); err != nil {
			b.Fatal(err)
		}
		sc.Exec(b, `VACUUM ANALYZE mail`)
		c, err := pgx.Connect(ctx, sc.URL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(ctx) })
		conns[name] = c
	}
	var key int64
	for _, w := range searchWrites {
		for _, rows := range []int{1, 10} {
			b.Run(fmt.Sprintf("%s/rows=%d", w.name, rows), func(b *testing.B) {
				for _, c := range conns { // every write starts from the status its reset leaves
					if w.reset == "" {
						break
					}
					if _, err := c.Exec(ctx, w.reset, allIDs()); err != nil {
						b.Fatal(err)
					}
				}
				ids := make([]int64, rows)
				exec, wal := map[string]float64{}, map[string]float64{}
				for b.Loop() {
					for i := range ids {
						key++
						ids[i] = key%10_000 + 1
					}
					order := []string{"after", "before"}
					if key%2 == 0 {
						order[0], order[1] = order[1], order[0]
					}
					for _, name := range order {
						ms, bytes := explainWAL(b, conns[name], w.write, ids)
						exec[name] += ms
						wal[name] += bytes
						if w.reset != "" {
							if _, err := conns[name].Exec(ctx, w.reset, ids); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				n := float64(b.N)
				b.ReportMetric(1000*exec["before"]/n, "before-µs/stmt")
				b.ReportMetric(1000*exec["after"]/n, "after-µs/stmt")
				b.ReportMetric(1000*(exec["after"]-exec["before"])/n, "added-µs/stmt")
				b.ReportMetric(wal["before"]/n, "before-WAL-B/stmt")
				b.ReportMetric(wal["after"]/n, "after-WAL-B/stmt")
			})
		}
	}
}

// BenchmarkSearchIndexPipeline runs the store's own ingest, claim and
// outcome write of 20 mails in a loop (as BenchmarkSearch's writes) for
// 2 s in a schema migrated up to date and 2 s in one migrated down to
// before 00240, four times in turns, and reports the mails per second of
// each and their ratio.
//
//	go test -run '^$' -bench SearchIndexPipeline -benchtime 1x ./internal/store/
func BenchmarkSearchIndexPipeline(b *testing.B) {
	schemas := map[string]*storetest.Schema{"after": storetest.New(b), "before": storetest.New(b)}
	migrateDownThrough(b, schemas["before"], 240)
	rate := map[string]float64{}
	for b.Loop() {
		for round := range 4 { // in turns, the first alternating
			order := []string{"after", "before"}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, name := range order {
				rate[name] += writeFor(b, schemas[name].Store, 2*time.Second)
			}
		}
	}
	n := 4 * float64(b.N)
	b.ReportMetric(rate["before"]/n, "before-mails/s")
	b.ReportMetric(rate["after"]/n, "after-mails/s")
	b.ReportMetric(rate["after"]/rate["before"], "ratio")
}

// allIDs are the ids of the benchmark's seeded mails.
func allIDs() []int64 {
	ids := make([]int64, 10_000)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	return ids
}

// explainWAL runs q with EXPLAIN (ANALYZE, WAL) on c and returns its
// execution time in milliseconds (triggers included) and the WAL bytes it
// wrote.
func explainWAL(b *testing.B, c *pgx.Conn, q string, args ...any) (exec, wal float64) {
	b.Helper()
	var out []struct {
		ExecutionTime float64 `json:"Execution Time"`
		Plan          struct {
			WALBytes float64 `json:"WAL Bytes"`
		} `json:"Plan"`
	}
	if err := c.QueryRow(context.Background(), `EXPLAIN (ANALYZE, WAL, FORMAT JSON) `+q, args...).Scan(&out); err != nil || len(out) != 1 {
		b.Fatal(err, out)
	}
	return out[0].ExecutionTime, out[0].Plan.WALBytes
}
