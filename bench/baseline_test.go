package bench

// The raw baseline of BenchmarkEndToEnd: the least work that still takes an
// event from the broker to an SMTP server through PostgreSQL, built here in
// the test program and run in a child process of it (runRawChild). It is a
// yardstick, not a design: it validates nothing, renders no template (a
// one-line subject and body, plus set.padBytes of filler in each body when
// set) and, but for the floor variant (set.render and set.feedback,
// floor_test.go: mails rendered with mailsvc's templates, one
// EmailSent per mail through a transactional queue and a confirming
// relay), writes no feedback event and publishes nothing. The variants that
// record each send as mailsvc's promise asks are in recorded_test.go.
// SQL in test code is acceptable here for that reason only; mailsvc's own
// SQL lives in internal/store. The child parses events itself (rawEvent)
// rather than through mailsvc's consumer, which it is measured against.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// Baseline statements, on the mail table of the migrated test schema (the
// same table and indexes mailsvc writes).
const (
	// rawInsertSQL: one multi-row INSERT per batch of deliveries.
	rawInsertSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, to_email, payload, subject, body_text, body_html, status)
SELECT e, k, o, 'raw', t, p::jsonb, s, x, h, 'pending'
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
    AS u(e, k, o, t, p, s, x, h)`
	// rawClaimSQL: a simple UPDATE ... RETURNING over due pending rows. The
	// ids are an array, not `id IN (SELECT ...)`: that form was planned as
	// a hash semi-join over a sequential scan of the table and made this
	// baseline 4x slower than mailsvc (internal/store/claim.go says the same
	// of a join).
	rawClaimSQL = `
UPDATE mail SET status = 'sending', attempts = attempts + 1, locked_until = now() + interval '1 minute',
    locked_by = 'raw', updated_at = now()
WHERE id = ANY (ARRAY(SELECT id FROM mail WHERE status = 'pending' AND NOT cancel_requested AND send_after <= now()
                      ORDER BY send_after, id LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING id, dedupe_key, to_email, subject, body_text, body_html`
	// rawMarkSQL: one UPDATE per claimed batch once its mails were sent.
	rawMarkSQL = `UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY($1)`
	// rawMarkRowSQL: with markPerRow, one UPDATE per mail right after its
	// send, as a sender that records each delivery on its own would do.
	rawMarkRowSQL = `UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = $1`
)

// rawEvent is the part of an event the baseline reads (the order's
// lines and amounts only with set.render).
type rawEvent struct {
	EventID    string    `json:"event_id"`
	DedupeKey  string    `json:"dedupe_key"`
	OccurredAt time.Time `json:"occurred_at"`
	Data       struct {
		OrderID      string `json:"order_id"`
		Email        string `json:"email"`
		CustomerName string `json:"customer_name"`
		Locale       string `json:"locale"`
		Currency     string `json:"currency"`
		Total        string `json:"total"`
		Items        []struct {
			SKU       string `json:"sku"`
			Name      string `json:"name"`
			Quantity  int    `json:"quantity"`
			UnitPrice string `json:"unit_price"`
		} `json:"items"`
	} `json:"data"`
}

// order is ev as the templates take it.
func (ev *rawEvent) order() templates.Order {
	d := ev.Data
	o := templates.Order{OrderID: d.OrderID, Email: d.Email, CustomerName: d.CustomerName, Locale: d.Locale,
		Currency: d.Currency, Total: d.Total, OccurredAt: ev.OccurredAt}
	for _, it := range d.Items {
		o.Items = append(o.Items, templates.Item{SKU: it.SKU, Name: it.Name, Quantity: it.Quantity, UnitPrice: it.UnitPrice})
	}
	return o
}

// rawRow is a claimed row.
type rawRow struct {
	id                           int64
	key, to, subject, text, html string
}

// rawPipeline is the running baseline: one ingest loop (consume, insert,
// multiple ack after the commit) and set.workers send loops (claim, send
// on their own go-mail connection, mark), woken by the ingest loop. It runs
// in a process of its own (runRawChild), so that its CPU can be measured
// apart from the publisher and the SMTP server of the test process.
type rawPipeline struct {
	set benchSettings
	// tmpl renders the mails with set.render (nil otherwise).
	tmpl *templates.Registry
	pool *pgxpool.Pool
	conn *amqp.Connection
	ch   *amqp.Channel
	wake []chan struct{}
	// records carries the workers' writes to the group commit
	// (recordLoop) with set.recordEach.
	records chan recordRequest
	// eventsExchange is where the relay publishes with set.feedback;
	// relayWake wakes it after a batch's mark committed (markSent).
	eventsExchange string
	relayWake      chan struct{}
	cancel         context.CancelFunc
	wg             sync.WaitGroup

	errOnce sync.Once
	// failed is closed by the first error of a loop, which err then holds.
	failed chan struct{}
	err    error
}

// rawConfig is what the baseline's process is told through its
// environment (rawEnv): where the servers are and the settings.
type rawConfig struct {
	set             benchSettings
	dbURL, amqpURL  string
	queue, smtpAddr string
	// eventsExchange is where feedback events go (set.feedback); the
	// parent declares it.
	eventsExchange string
}

// Environment of the baseline's process: MAILSVC_BENCH_RAW_CHILD selects it
// in TestMain, the others are its rawConfig.
const (
	rawChildEnv = "MAILSVC_BENCH_RAW_CHILD"
	rawPrefix   = "MAILSVC_BENCH_RAW_"
)

// rawEnv is c as the environment of the baseline's process.
func (c rawConfig) rawEnv() []string {
	kv := map[string]string{
		"DATABASE_URL": c.dbURL, "AMQP_URL": c.amqpURL, "QUEUE": c.queue, "SMTP_ADDR": c.smtpAddr,
		"WORKERS": strconv.Itoa(c.set.workers), "SEND_BATCH": strconv.Itoa(c.set.sendBatch),
		"PREFETCH": strconv.Itoa(c.set.prefetch), "INGEST_BATCH": strconv.Itoa(c.set.ingestBatch),
		"POLL": c.set.poll.String(), "PAD_BYTES": strconv.Itoa(c.set.padBytes), "RENDER": strconv.FormatBool(c.set.render),
		"MARK_PER_ROW": strconv.FormatBool(c.set.markPerRow), "RECORD_EACH": strconv.FormatBool(c.set.recordEach),
		"RECORD_LOG": strconv.FormatBool(c.set.recordLog), "FEEDBACK": strconv.FormatBool(c.set.feedback),
		"EVENTS_EXCHANGE": c.eventsExchange,
	}
	env := []string{rawChildEnv + "=1"}
	for k, v := range kv {
		env = append(env, rawPrefix+k+"="+v)
	}
	return env
}

// rawConfigFromEnv reads what rawEnv wrote; an absent or malformed value
// is an error.
func rawConfigFromEnv() (rawConfig, error) {
	var errs []error
	str := func(k string) string {
		v, ok := os.LookupEnv(rawPrefix + k)
		if !ok {
			errs = append(errs, fmt.Errorf("%s%s is not set", rawPrefix, k))
		}
		return v
	}
	num := func(k string) int {
		n, err := strconv.Atoi(str(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", rawPrefix, k, err))
		}
		return n
	}
	c := rawConfig{dbURL: str("DATABASE_URL"), amqpURL: str("AMQP_URL"), queue: str("QUEUE"), smtpAddr: str("SMTP_ADDR"),
		eventsExchange: str("EVENTS_EXCHANGE")}
	c.set = benchSettings{name: "raw", workers: num("WORKERS"), sendBatch: num("SEND_BATCH"), prefetch: num("PREFETCH"),
		ingestBatch: num("INGEST_BATCH"), padBytes: num("PAD_BYTES")}
	var err error
	if c.set.poll, err = time.ParseDuration(str("POLL")); err != nil {
		errs = append(errs, fmt.Errorf("%sPOLL: %w", rawPrefix, err))
	}
	if c.set.markPerRow, err = strconv.ParseBool(str("MARK_PER_ROW")); err != nil {
		errs = append(errs, fmt.Errorf("%sMARK_PER_ROW: %w", rawPrefix, err))
	}
	if c.set.recordEach, err = strconv.ParseBool(str("RECORD_EACH")); err != nil {
		errs = append(errs, fmt.Errorf("%sRECORD_EACH: %w", rawPrefix, err))
	}
	if c.set.recordLog, err = strconv.ParseBool(str("RECORD_LOG")); err != nil {
		errs = append(errs, fmt.Errorf("%sRECORD_LOG: %w", rawPrefix, err))
	}
	if c.set.render, err = strconv.ParseBool(str("RENDER")); err != nil {
		errs = append(errs, fmt.Errorf("%sRENDER: %w", rawPrefix, err))
	}
	if c.set.feedback, err = strconv.ParseBool(str("FEEDBACK")); err != nil {
		errs = append(errs, fmt.Errorf("%sFEEDBACK: %w", rawPrefix, err))
	}
	if c.set.feedback && (!c.set.recordEach || !c.set.recordLog || c.eventsExchange == "") {
		errs = append(errs, fmt.Errorf("%sFEEDBACK needs RECORD_EACH, RECORD_LOG and EVENTS_EXCHANGE", rawPrefix))
	}
	return c, errors.Join(errs...)
}

// runRawChild is the baseline's process (TestMain runs it instead of the
// tests when MAILSVC_BENCH_RAW_CHILD is set): it starts the pipeline,
// writes "ready" on stdout once it consumes and every SMTP connection is
// open, and runs until SIGTERM. It returns the exit code: 0 after SIGTERM
// with no error, 1 with the first error on stderr, as soon as one happens.
func runRawChild() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	c, err := rawConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "raw baseline:", err)
		return 1
	}
	r, err := startRaw(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raw baseline:", err)
		return 1
	}
	fmt.Println("ready")
	select {
	case <-term:
	case <-r.failed:
	}
	if err := r.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "raw baseline:", err)
		return 1
	}
	return 0
}

// startRaw connects to the servers, consumes c.queue (declared by the
// parent) and starts the loops, with set.feedback the relay too. It
// returns once every SMTP connection is open, or the first error.
func startRaw(c rawConfig) (_ *rawPipeline, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &rawPipeline{set: c.set, eventsExchange: c.eventsExchange, cancel: cancel, failed: make(chan struct{})}
	if c.set.render {
		if r.tmpl, err = templates.New(templates.Options{}); err != nil {
			cancel()
			return nil, fmt.Errorf("templates: %w", err)
		}
	}
	var clients []*gomail.Client
	defer func() {
		if err != nil {
			for _, cl := range clients {
				_ = cl.Close()
			}
			r.close()
		}
	}()
	pcfg, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pcfg.MaxConns = int32(c.set.workers + 2) // the workers, the ingest loop and the group commit
	if r.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if r.conn, err = amqp.Dial(c.amqpURL); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if r.ch, err = r.conn.Channel(); err != nil {
		return nil, fmt.Errorf("broker channel: %w", err)
	}
	if err := r.ch.Qos(c.set.prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("qos: %w", err)
	}
	host, port, err := net.SplitHostPort(c.smtpAddr)
	if err != nil {
		return nil, fmt.Errorf("SMTP address: %w", err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("SMTP port: %w", err)
	}
	opts := []gomail.Option{gomail.WithPort(portNum), gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithHELO("bench.local")}
	if c.set.feedback {
		// The floor does what a careful plain client does: no NOOP before
		// and no RSET after each mail (go-mail's defaults, which the other
		// baselines keep), 4 round trips a mail instead of 6.
		opts = append(opts, gomail.WithoutNoop(), gomail.WithoutRset())
	}
	for range c.set.workers {
		cl, err := gomail.NewClient(host, opts...)
		if err == nil {
			err = cl.DialWithContext(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("SMTP: %w", err)
		}
		clients = append(clients, cl)
	}
	deliveries, err := r.ch.Consume(c.queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", c.queue, err)
	}
	if c.set.recordEach {
		if err := r.startRecording(ctx); err != nil {
			return nil, err
		}
	}
	if c.set.feedback {
		if err := r.startRelay(ctx, c.dbURL); err != nil {
			return nil, err
		}
	}
	for _, cl := range clients {
		w := make(chan struct{}, 1)
		r.wake = append(r.wake, w)
		r.wg.Go(func() { r.sendLoop(ctx, cl, w) })
	}
	// amqp091's deliveries channel is unbuffered: a buffered copy lets the
	// ingest loop see what already arrived and batch it.
	in := make(chan amqp.Delivery, c.set.prefetch)
	r.wg.Go(func() {
		defer close(in)
		for d := range deliveries {
			in <- d
		}
	})
	r.wg.Go(func() { r.ingest(ctx, in) })
	return r, nil
}

// fail records err if it is the first error (and ctx is not done: a
// statement cut short by stop is no failure).
func (r *rawPipeline) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.errOnce.Do(func() { r.err = err; close(r.failed) })
}

// stop ends the loops and the connections and returns the first error a
// loop had, if any.
func (r *rawPipeline) stop() error {
	r.cancel()
	_ = r.ch.Close() // ends the deliveries channel
	r.wg.Wait()
	r.close()
	return r.err
}

// close closes the pool and the broker connection, whichever is open.
func (r *rawPipeline) close() {
	r.cancel()
	if r.pool != nil {
		r.pool.Close()
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
}

// startBaseline declares a quorum queue bound to a fresh input exchange,
// creates a fresh schema and starts the raw pipeline in a process of its
// own: the test binary again, with MAILSVC_BENCH_RAW_CHILD set. With
// set.feedback it first declares the events exchange and a queue that
// counts the EmailSent events (newFloorEvents). It returns once that
// process said it is ready; stop sends it SIGTERM and fails the benchmark
// if it exits non-zero (its stderr has the error).
func startBaseline(b *testing.B, set benchSettings, discard bool) *system {
	srv := smtptest.New(b, smtptest.Options{Discard: discard})
	sc := storetest.New(b)
	names := brokertest.New(b)
	conn := brokertest.DialRaw(b)
	ch, err := conn.Channel()
	require.NoError(b, err)
	require.NoError(b, ch.ExchangeDeclare(names.InputExchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(names.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(b, err)
	require.NoError(b, ch.QueueBind(names.Queue, "order.confirmed", names.InputExchange, false, nil))
	require.NoError(b, conn.Close())
	var events *floorEvents
	if set.feedback {
		events = newFloorEvents(b, names)
	}

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), rawConfig{set: set, dbURL: sc.URL, amqpURL: brokertest.URL(), queue: names.Queue,
		smtpAddr: srv.Addr, eventsExchange: names.EventsExchange}.rawEnv()...)
	logs := &e2etest.SyncBuffer{}
	cmd.Stderr = logs
	// A pipe of our own, not StdoutPipe: Wait does not close it, so the
	// "ready" line is read even if the process exits right after it.
	stdout, w, err := os.Pipe()
	require.NoError(b, err)
	cmd.Stdout = w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = stdout.Close()
	}
	require.NoError(b, err)
	ready := make(chan bool, 1)
	go func() {
		defer stdout.Close()
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line == "ready\n"
		_, _ = io.Copy(io.Discard, stdout)
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	select {
	case ok := <-ready:
		if !ok {
			<-done
			b.Fatalf("raw baseline exited at start (%v):\n%s", cmd.ProcessState, logs.String())
		}
	case <-time.After(30 * time.Second):
		b.Fatalf("raw baseline not ready within 30 s:\n%s", logs.String())
	}
	return &system{names: names, smtp: srv, pid: cmd.Process.Pid, done: done, logs: logs.String, schema: sc,
		settle: func(b *testing.B, n int) {
			require.Eventually(b, func() bool {
				return sc.QueryInt(b, `SELECT count(*) FROM mail WHERE status = 'sent'`) == int64(n)
			}, time.Minute, 10*time.Millisecond, "baseline rows sent")
			require.Equal(b, n, srv.Count(), "SMTP deliveries")
			if events != nil {
				events.settle(b, sc, n)
			}
		},
		stop: func(b *testing.B) {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				b.Fatalf("raw baseline did not stop within 30 s after SIGTERM:\n%s", logs.String())
			}
			if !cmd.ProcessState.Success() {
				b.Fatalf("raw baseline: %v:\n%s", cmd.ProcessState, logs.String())
			}
		},
	}
}

// ingest takes a delivery, adds whatever else is already buffered up to
// set.ingestBatch, inserts them in one statement and acks them all.
func (r *rawPipeline) ingest(ctx context.Context, in <-chan amqp.Delivery) {
	for d := range in {
		batch := []amqp.Delivery{d}
	fill:
		for len(batch) < r.set.ingestBatch {
			select {
			case d, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, d)
			default:
				break fill
			}
		}
		if err := r.insert(ctx, batch); err != nil {
			r.fail(ctx, err)
			return
		}
		if err := r.ch.Ack(batch[len(batch)-1].DeliveryTag, true); err != nil {
			r.fail(ctx, fmt.Errorf("ack: %w", err))
			return
		}
		for _, w := range r.wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

func (r *rawPipeline) insert(ctx context.Context, batch []amqp.Delivery) error {
	cols := make([][]string, 8)
	filler := rawFiller(r.set.padBytes)
	for _, d := range batch {
		var ev rawEvent
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		subject := "Order " + ev.Data.OrderID + " confirmed"
		row := []string{ev.EventID, ev.DedupeKey, ev.Data.OrderID, ev.Data.Email, string(d.Body), subject,
			subject + "\n" + filler, "<p>" + subject + "</p><p>" + filler + "</p>"}
		if r.tmpl != nil {
			m, err := r.tmpl.Render(templates.OrderConfirmed, ev.Data.Locale, ev.order())
			if err != nil {
				return fmt.Errorf("render %s: %w", ev.DedupeKey, err)
			}
			row[3], row[5], row[6], row[7] = m.ToAddress, m.Subject, m.Text, m.HTML
		}
		for i, v := range row {
			cols[i] = append(cols[i], v)
		}
	}
	if _, err := r.pool.Exec(ctx, rawInsertSQL, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7]); err != nil {
		return fmt.Errorf("insert raw mails: %w", err)
	}
	return nil
}

// sendLoop claims up to set.sendBatch rows, sends them on its go-mail
// connection c and marks them sent; with nothing due it waits for a
// wake-up or set.poll. It closes c when it returns.
func (r *rawPipeline) sendLoop(ctx context.Context, c *gomail.Client, wake <-chan struct{}) {
	defer func() { _ = c.Close() }()
	for ctx.Err() == nil {
		rows, err := r.claim(ctx)
		if err != nil {
			r.fail(ctx, err)
			return
		}
		if len(rows) == 0 {
			select {
			case <-ctx.Done():
			case <-wake:
			case <-time.After(r.set.poll):
			}
			continue
		}
		if err := r.sendAndMark(ctx, c, rows); err != nil {
			r.fail(ctx, err)
			return
		}
	}
}

func (r *rawPipeline) claim(ctx context.Context) ([]rawRow, error) {
	rs, err := r.pool.Query(ctx, rawClaimSQL, r.set.sendBatch)
	if err != nil {
		return nil, fmt.Errorf("claim raw mails: %w", err)
	}
	defer rs.Close()
	var rows []rawRow
	for rs.Next() {
		var w rawRow
		if err := rs.Scan(&w.id, &w.key, &w.to, &w.subject, &w.text, &w.html); err != nil {
			return nil, fmt.Errorf("scan raw mail: %w", err)
		}
		rows = append(rows, w)
	}
	return rows, rs.Err()
}

// sendAndMark sends the rows in order and marks them sent: each right
// after its send with set.markPerRow, else all in one statement after the
// last send.
func (r *rawPipeline) sendAndMark(ctx context.Context, c *gomail.Client, rows []rawRow) error {
	if r.set.recordEach {
		return r.sendRecorded(ctx, rows, func(w rawRow) error { return rawSend(c, w) })
	}
	ids := make([]int64, len(rows))
	for i, w := range rows {
		if err := rawSend(c, w); err != nil {
			return err
		}
		ids[i] = w.id
		if r.set.markPerRow {
			if _, err := r.pool.Exec(ctx, rawMarkRowSQL, w.id); err != nil {
				return fmt.Errorf("mark raw mail %s sent: %w", w.key, err)
			}
		}
	}
	if r.set.markPerRow {
		return nil
	}
	if _, err := r.pool.Exec(ctx, rawMarkSQL, ids); err != nil {
		return fmt.Errorf("mark raw mails sent: %w", err)
	}
	return nil
}

// rawSend sends w on c.
func rawSend(c *gomail.Client, w rawRow) error {
	m, err := rawMessage(w)
	if err != nil {
		return err
	}
	if err := c.Send(m); err != nil {
		return fmt.Errorf("send raw mail %s: %w", w.key, err)
	}
	return nil
}

// rawMessage builds a small multipart/alternative message with the
// headers the latency run matches on.
func rawMessage(w rawRow) (*gomail.Msg, error) {
	m := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := m.From("orders@shop.example"); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if err := m.To(w.to); err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	m.Subject(w.subject)
	m.SetMessageIDWithValue(w.key + "@shop.example")
	m.SetDateWithValue(time.Now().UTC())
	m.SetGenHeader("X-Dedupe-Key", w.key)
	m.SetBodyString(gomail.TypeTextPlain, w.text)
	m.AddAlternativeString(gomail.TypeTextHTML, w.html)
	return m, nil
}

// rawFiller is about n bytes of Vietnamese text (quoted-printable makes it
// about 2.5 times larger on the wire, as it does mailsvc's content).
func rawFiller(n int) string {
	const line = "Cảm ơn quý khách đã mua hàng tại cửa hàng của chúng tôi.\n"
	return strings.Repeat(line, n/len(line))
}
