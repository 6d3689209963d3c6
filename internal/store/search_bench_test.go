package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// searchFillSQL writes mails $2 to $3 of the benchmark's $1 mails: $1 rows
// received over 90 days in id order, ~95.5 % sent, 2.5 % failed, 1.5 %
// cancelled, 0.5 % unknown and the last 300 pending; 80 % through Resend;
// 200,000 recipients on four domains, one in ten stored with capitals,
// and one mail in a hundred to one address (a shop's copy address);
// five templates; about 1.3 mails per order.
const searchFillSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload, subject, body_text, body_html,
    message_id, status, attempts, sends, provider, provider_message_id, last_error, occurred_at, created_at, updated_at, sent_at)
SELECT gen_random_uuid(), t.template || ':' || g, (g * 10 / 13)::text, t.template, 'vi',
    CASE WHEN g % 100 = 1 THEN 'Copies@Shop.example' ELSE
        CASE WHEN g % 10 = 0 THEN 'Customer' ELSE 'customer' END || ((g::bigint * 7919) % 200000) || '@' ||
        (ARRAY['example.com', 'Mail.Example.org', 'shop.example.net', 'example.vn'])[1 + (g::bigint * 7919) % 4] END,
    jsonb_build_object('order_id', g), 'Order ' || g, repeat('Thank you for your order. ', 12),
    '<p>' || repeat('Thank you for your order. ', 24) || '</p>', '<' || g || '@shop.example>',
    s.status, CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END, CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
    CASE WHEN s.status IN ('sent', 'failed', 'unknown') THEN p.provider END,
    CASE WHEN s.status IN ('sent', 'failed') AND p.provider = 'resend' THEN 'em_' || md5(g::text)
         WHEN s.status IN ('sent', 'failed') THEN '250 2.0.0 Ok: queued as ' || upper(to_hex(g)) END,
    CASE WHEN s.status = 'failed' THEN 'rejected: 550 5.1.1 user unknown' END,
    c.at - interval '1 second', c.at, c.at + interval '3 seconds',
    CASE WHEN s.status = 'sent' THEN c.at + interval '3 seconds' END
FROM generate_series($2::int, $3::int) g
CROSS JOIN LATERAL (SELECT now() - interval '90 days' * (1 - g::float8 / $1::int) AS at) c
CROSS JOIN LATERAL (SELECT CASE WHEN g > $1::int - 300 THEN 'pending'
    WHEN (g * 37) % 1000 < 955 THEN 'sent' WHEN (g * 37) % 1000 < 980 THEN 'failed'
    WHEN (g * 37) % 1000 < 995 THEN 'cancelled' ELSE 'unknown' END AS status) s
CROSS JOIN LATERAL (SELECT CASE WHEN g % 5 = 0 THEN 'smtp' ELSE 'resend' END AS provider) p
CROSS JOIN LATERAL (SELECT (ARRAY['order_confirmed', 'order_confirmed', 'order_confirmed', 'order_shipped',
    'order_shipped', 'password_reset', 'order_cancelled', 'invoice'])[1 + (g * 13) % 8] AS template) t`

// searchFillOutboxSQL writes an EmailSent (published) for the last $1
// sent mails, 100 unpublished events and 10 dead ones.
const searchFillOutboxSQL = `
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, created_at, published_at, attempts)
SELECT gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', order_id, dedupe_key, '{}', sent_at, sent_at + interval '1 second', 1
FROM (SELECT * FROM mail WHERE status = 'sent' ORDER BY id DESC LIMIT $1) m ORDER BY id`

// searchOutboxStateSQL leaves the last 100 outbox rows unpublished and
// makes the first 10 dead.
var searchOutboxStateSQL = []string{
	`UPDATE outbox SET published_at = NULL, attempts = 0 WHERE id > (SELECT max(id) - 100 FROM outbox)`,
	`UPDATE outbox SET published_at = NULL, dead_at = now(), attempts = 10, last_error = 'unroutable'
    WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 10)`,
}

// searchSample is what the random searches pick their parameters from: a
// few thousand of the benchmark's mails, read once.
type searchSample struct {
	orders, recipients, keys, events, pmids, outboxEvents []string
	oldest, newest                                        time.Time
}

func readSearchSample(b *testing.B, sc *storetest.Schema) searchSample {
	b.Helper()
	col := func(q string) []string { return sc.QueryStrings(b, q) }
	s := searchSample{
		orders:       col(`SELECT order_id FROM mail TABLESAMPLE SYSTEM (0.5) LIMIT 2000`),
		recipients:   col(`SELECT to_email FROM mail TABLESAMPLE SYSTEM (0.5) LIMIT 2000`),
		keys:         col(`SELECT dedupe_key FROM mail TABLESAMPLE SYSTEM (0.5) LIMIT 2000`),
		events:       col(`SELECT event_id::text FROM mail TABLESAMPLE SYSTEM (0.5) LIMIT 2000`),
		pmids:        col(`SELECT provider_message_id FROM mail TABLESAMPLE SYSTEM (0.5) WHERE provider_message_id IS NOT NULL LIMIT 2000`),
		outboxEvents: col(`SELECT event_id::text FROM outbox TABLESAMPLE SYSTEM (2) LIMIT 2000`),
	}
	bounds := col(`SELECT extract(epoch FROM min(created_at))::bigint::text || ' ' || extract(epoch FROM max(created_at))::bigint::text FROM mail`)
	var lo, hi int64
	if _, err := fmt.Sscan(bounds[0], &lo, &hi); err != nil {
		b.Fatal(err)
	}
	s.oldest, s.newest = time.Unix(lo, 0), time.Unix(hi, 0)
	return s
}

// searchKinds are the searches the benchmark times: each makes a query from
// the random source and the sample.
var searchKinds = []struct {
	name  string
	query func(r *rand.Rand, s searchSample) store.MailQuery
}{
	{"recent", func(*rand.Rand, searchSample) store.MailQuery { return store.MailQuery{} }},
	{"order", func(r *rand.Rand, s searchSample) store.MailQuery { return store.MailQuery{OrderID: pick(r, s.orders)} }},
	{"recipient", func(r *rand.Rand, s searchSample) store.MailQuery {
		to := pick(r, s.recipients)
		if r.IntN(2) == 0 {
			to = strings.ToUpper(to)
		}
		return store.MailQuery{Recipient: to}
	}},
	{"recipient-10000-mails", func(*rand.Rand, searchSample) store.MailQuery {
		return store.MailQuery{Recipient: "copies@shop.example"}
	}},
	{"dedupe-key", func(r *rand.Rand, s searchSample) store.MailQuery { return store.MailQuery{DedupeKey: pick(r, s.keys)} }},
	{"input-event-id", func(r *rand.Rand, s searchSample) store.MailQuery { return store.MailQuery{EventID: pick(r, s.events)} }},
	{"feedback-event-id", func(r *rand.Rand, s searchSample) store.MailQuery {
		return store.MailQuery{EventID: pick(r, s.outboxEvents)}
	}},
	{"provider-message-id", func(r *rand.Rand, s searchSample) store.MailQuery {
		return store.MailQuery{ProviderMessageID: pick(r, s.pmids)}
	}},
	{"status-rare", func(r *rand.Rand, _ searchSample) store.MailQuery {
		return store.MailQuery{Statuses: []mailtype.Status{pick(r, []mailtype.Status{mailtype.StatusFailed,
			mailtype.StatusUnknown, mailtype.StatusPending, mailtype.StatusCancelled})}}
	}},
	{"status-sent", func(*rand.Rand, searchSample) store.MailQuery {
		return store.MailQuery{Statuses: []mailtype.Status{mailtype.StatusSent}}
	}},
	{"template", func(r *rand.Rand, _ searchSample) store.MailQuery {
		return store.MailQuery{Template: pick(r, []string{"order_confirmed", "order_shipped", "password_reset", "order_cancelled", "invoice"})}
	}},
	{"provider", func(r *rand.Rand, _ searchSample) store.MailQuery {
		return store.MailQuery{Provider: pick(r, []string{"smtp", "resend"})}
	}},
	{"day", func(r *rand.Rand, s searchSample) store.MailQuery {
		since := randomTime(r, s)
		return store.MailQuery{Since: since, Until: since.Add(24 * time.Hour), Oldest: r.IntN(2) == 0}
	}},
	{"week-failed-template", func(r *rand.Rand, s searchSample) store.MailQuery {
		since := randomTime(r, s)
		return store.MailQuery{Since: since, Until: since.Add(7 * 24 * time.Hour), Template: "order_confirmed",
			Statuses: []mailtype.Status{mailtype.StatusFailed}}
	}},
	{"deep-page", func(r *rand.Rand, _ searchSample) store.MailQuery {
		return store.MailQuery{Offset: 5000 + r.IntN(5000)}
	}},
}

func pick[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

func randomTime(r *rand.Rand, s searchSample) time.Time {
	return s.oldest.Add(time.Duration(r.Int64N(int64(s.newest.Sub(s.oldest)))))
}

// BenchmarkSearch times each kind of support search (store.SearchMails,
// a page of 50 with its count) and the overview on 1,000,000 mails, and
// what searching does to the hot path's writes. The mails are written
// once (INSERT ... SELECT in statements of 100,000, about a minute) into
// the benchmark's own schema, dropped at the end. Each kind runs 200
// searches with random parameters (the seed is logged) and
// reports their p50 and p95 in ms; writes-beside-* report the mails
// ingested, claimed and sent per second alone and beside a searcher, and
// the ratio. make bench runs it; alone:
//
//	go test -run '^$' -bench 'Search$' -benchtime 1x -timeout 30m ./internal/store/
func BenchmarkSearch(b *testing.B) {
	sc := storetestNewFilled(b)
	ctx := context.Background()
	sample := readSearchSample(b, sc)
	seed := uint64(time.Now().UnixNano())
	b.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for _, k := range searchKinds {
		b.Run(k.name, func(b *testing.B) {
			timeSearches(b, func() error {
				q := k.query(r, sample)
				q.Limit = 50
				_, err := sc.Store.SearchMails(ctx, q)
				return err
			})
		})
	}
	b.Run("overview", func(b *testing.B) {
		timeSearches(b, func() error { _, err := sc.Store.Overview(ctx); return err })
	})
	b.Run("writes-beside-desk", func(b *testing.B) { benchWritesBesideSearches(b, sc, sample, seed, 200*time.Millisecond) })
	b.Run("writes-beside-nonstop", func(b *testing.B) { benchWritesBesideSearches(b, sc, sample, seed, 0) })
}

// storetestNewFilled returns a new schema holding the benchmark's
// 1,000,000 mails, vacuumed and analyzed.
func storetestNewFilled(b *testing.B) *storetest.Schema {
	const mails = 1_000_000
	sc := storetest.New(b)
	ctx := context.Background()
	start := time.Now()
	for from := 1; from <= mails; from += 100_000 { // a statement within storetest's 30 s
		sc.Exec(b, searchFillSQL, mails, from, from+99_999)
	}
	sc.Exec(b, searchFillOutboxSQL, 200_000)
	for _, q := range searchOutboxStateSQL {
		sc.Exec(b, q)
	}
	if _, err := sc.Store.CompactStatusCounts(ctx); err != nil {
		b.Fatal(err)
	}
	sc.Exec(b, `VACUUM ANALYZE mail`)
	sc.Exec(b, `VACUUM ANALYZE outbox`)
	sc.Exec(b, `VACUUM mail_status_delta`)
	b.Logf("filled %d mails and 200,000 outbox rows in %s", mails, time.Since(start).Round(time.Second))
	return sc
}

// timeSearches runs search 200 times per iteration and reports the p50
// and p95 of its time.
func timeSearches(b *testing.B, search func() error) {
	var took []time.Duration
	for b.Loop() {
		for range 200 {
			t0 := time.Now()
			if err := search(); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(t0))
		}
	}
	slices.Sort(took)
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[len(took)*95/100]), "p95-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchWritesBesideSearches measures the hot path's writes (ingest of 20
// mails in one call, their claim and their sent outcome, in a loop) for
// 3 s alone and 3 s beside a searcher running random searches of every
// kind, twice in turns, and reports the mails per second of each and
// their ratio. The searcher runs every (a busy support desk: a search
// every 200 ms), or without pause when every is 0 (the worst case: one
// core's worth of searching on a 2-core machine).
func benchWritesBesideSearches(b *testing.B, sc *storetest.Schema, sample searchSample, seed uint64, every time.Duration) {
	ctx := context.Background()
	var alone, beside float64
	var searches atomic.Int64
	for b.Loop() {
		for round := range 2 {
			alone += writeFor(b, sc.Store, 3*time.Second)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(round+1)))
				var tick <-chan time.Time
				if every > 0 {
					t := time.NewTicker(every)
					defer t.Stop()
					tick = t.C
				}
				for {
					if tick != nil {
						select {
						case <-stop:
							return
						case <-tick:
						}
					}
					select {
					case <-stop:
						return
					default:
					}
					q := pick(r, searchKinds).query(r, sample)
					q.Limit = 50
					if _, err := sc.Store.SearchMails(ctx, q); err != nil {
						b.Error(err)
						return
					}
					searches.Add(1)
				}
			})
			beside += writeFor(b, sc.Store, 3*time.Second)
			close(stop)
			wg.Wait()
		}
	}
	n := float64(b.N)
	b.ReportMetric(alone/2/n, "alone-mails/s")
	b.ReportMetric(beside/2/n, "beside-mails/s")
	b.ReportMetric(beside/alone, "ratio")
	b.ReportMetric(float64(searches.Load())/6/n, "searches/s")
}

// writeFor ingests, claims and sends mails in batches of 20 for d and
// returns the mails sent per second.
func writeFor(b *testing.B, st *store.Store, d time.Duration) float64 {
	ctx := context.Background()
	items := make([]store.IngestItem, 20)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		for i := range items {
			id := uuid.NewString()
			items[i] = store.IngestItem{Mail: &store.NewMail{EventID: id, DedupeKey: "w:" + id, OrderID: id, Template: "order_confirmed",
				Locale: "vi", ToEmail: "w@example.com", Payload: []byte(`{}`), Subject: "s", BodyText: "t", BodyHTML: "<p>h</p>",
				MessageID: "<" + id + "@shop.example>", From: "orders@shop.example", OccurredAt: time.Now()}}
		}
		if _, err := st.Ingest(ctx, items); err != nil {
			b.Fatal(err)
		}
		got, err := st.ClaimMails(ctx, store.ClaimParams{Limit: 20, Lease: time.Minute, Worker: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		as := make([]store.Attempt, len(got))
		for i, m := range got {
			as[i] = store.Attempt{Fence: m.Fence, Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "resend", ProviderMessageID: "em_w" + fmt.Sprint(m.ID)}}
		}
		if _, err := st.FinishAttempts(ctx, as); err != nil {
			b.Fatal(err)
		}
		n += len(got)
	}
	return float64(n) / time.Since(start).Seconds()
}
