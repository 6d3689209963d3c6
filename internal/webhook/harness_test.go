package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	svix "github.com/svix/svix-webhooks/go"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

// The endpoint's signing secret in the tests, and the one it had before a
// rotation. Both are base64 of 24 random-looking bytes, as Resend's are.
const (
	secret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	oldSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
)

// harness is one test's database schema, broker names, relay and webhook
// server, with an observer of everything the relay publishes.
type harness struct {
	sc      *storetest.Schema
	st      *store.Store
	obs     *brokertest.Observer
	srv     *webhook.Server
	metrics *webhook.Metrics
	url     string
	logs    *syncBuffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{sc: storetest.New(t), logs: &syncBuffer{}}
	names := brokertest.New(t)
	h.obs = brokertest.Observe(t, names.EventsExchange, names.EventsQueue, "email.#")
	h.st = h.sc.Open(t, store.Options{URL: h.sc.URL, MaxConns: 4, EventsExchange: names.EventsExchange})
	log := slog.New(slog.NewJSONHandler(io.MultiWriter(h.logs, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	rel, err := relay.New(relay.Config{
		AMQP:     broker.Config{URL: brokertest.URL(), Name: "mailsvc-webhook-test", Backoff: 50 * time.Millisecond, BackoffMax: 300 * time.Millisecond},
		Exchange: names.EventsExchange, DeclareExchange: true, PollInterval: 100 * time.Millisecond,
		Lease: 3 * time.Second, LeaseRenew: time.Second, LeaseRetry: 100 * time.Millisecond,
	}, h.st, log, relay.NewMetrics(prometheus.NewRegistry()), broker.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	h.metrics = webhook.NewMetrics(prometheus.NewRegistry())
	h.srv, err = webhook.New(webhook.Config{Addr: "127.0.0.1:0", ResendSecret: secret, RetentionWindow: time.Hour, MaxBodyBytes: 4096},
		webhook.Deps{Store: h.st, Metrics: h.metrics, Log: log, OnOutboxWritten: rel.Wake})
	require.NoError(t, err)
	for _, c := range []interface {
		Start(context.Context) error
		Stop(context.Context) error
	}{rel, h.srv} {
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, c.Stop(ctx))
		})
	}
	h.url = "http://" + h.srv.Addr() + "/webhooks/resend"
	return h
}

// sentByResend writes a mail to `to` for order and records it sent by
// Resend with email id emailID, as the sender would.
func (h *harness) sentByResend(t *testing.T, order, to, emailID string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := storetest.InsertPending(ctx, h.st, storetest.Mail{OrderID: order, ToEmail: to})
	require.NoError(t, err)
	got, err := h.st.ClaimMails(ctx, store.ClaimParams{Limit: 1, Lease: time.Minute, Worker: "test"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err := h.st.FinishAttempts(ctx, []store.Attempt{{Fence: got[0].Fence,
		Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "resend", ProviderMessageID: emailID}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	return id
}

// signed returns the headers Resend sends with body: svix-id id,
// svix-timestamp at, and svix-signature made with each of secrets (space
// separated, as during a secret rotation), by the svix library.
func signed(t *testing.T, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	hd := http.Header{}
	hd.Set("Content-Type", "application/json")
	hd.Set("svix-id", id)
	hd.Set("svix-timestamp", strconv.FormatInt(at.Unix(), 10))
	var sigs []string
	for _, s := range secrets {
		wh, err := svix.NewWebhook(s)
		require.NoError(t, err)
		sig, err := wh.Sign(id, at, body)
		require.NoError(t, err)
		sigs = append(sigs, sig)
	}
	hd.Set("svix-signature", joinSpace(sigs))
	return hd
}

func joinSpace(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// reply is the endpoint's answer.
type reply struct {
	Code   int
	Result webhook.Result `json:"result"`
	Error  string         `json:"error"`
}

func (h *harness) post(t *testing.T, hd http.Header, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = hd
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var r reply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	r.Code = resp.StatusCode
	return r
}

// event is a Resend webhook body of type typ about email emailID to `to`,
// created at, with extra data fields.
func event(typ, emailID, to string, at time.Time, extra map[string]any) []byte {
	data := map[string]any{
		"email_id": emailID, "from": "Acme <orders@example.com>", "to": []string{to},
		"subject": "Xác nhận đơn hàng", "created_at": at.Add(-time.Second).Format(time.RFC3339Nano),
	}
	for k, v := range extra {
		data[k] = v
	}
	// Resend's times have milliseconds.
	b, err := json.Marshal(map[string]any{"type": typ, "created_at": at.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano), "data": data})
	if err != nil {
		panic(err)
	}
	return b
}

func bounce(kind, subType string) map[string]any {
	return map[string]any{"bounce": map[string]any{"type": kind, "subType": subType,
		"message": "The recipient's mail server rejected the mail: 550 5.1.1 user unknown"}}
}

// count runs a count query in the test's schema.
func (h *harness) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	return h.sc.QueryInt(t, q, args...)
}

// received reads mailsvc_webhooks_received_total{provider="resend",result}.
func (h *harness) received(t *testing.T, r webhook.Result) int {
	t.Helper()
	var d dto.Metric
	require.NoError(t, h.metrics.Received.WithLabelValues("resend", string(r)).Write(&d))
	return int(d.GetCounter().GetValue())
}

// reported reads mailsvc_provider_reports_total{provider="resend"} for
// "REPORT MATCHED", e.g. "bounced_permanent true".
func (h *harness) reported(t *testing.T, labels string) int {
	t.Helper()
	report, matched, _ := strings.Cut(labels, " ")
	var d dto.Metric
	require.NoError(t, h.metrics.Reports.WithLabelValues("resend", report, matched).Write(&d))
	return int(d.GetCounter().GetValue())
}

// published waits until the relay published every outbox row, then
// returns the feedback events that reached the exchange by type, each
// checked against the contract.
func (h *harness) published(t *testing.T) map[string]int {
	t.Helper()
	require.Eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM outbox WHERE published_at IS NULL`) == 0
	}, 20*time.Second, 10*time.Millisecond, "the relay did not publish the outbox")
	rows := int(h.count(t, `SELECT count(*) FROM outbox`))
	got := map[string]int{}
	for _, d := range h.obs.WaitFor(t, rows) {
		reasons := api.ValidateFeedbackMessage(api.Message{RoutingKey: d.RoutingKey, MessageID: d.MessageID, Type: d.Type,
			ContentType: d.ContentType, Persistent: d.Persistent, Body: d.Body})
		require.Empty(t, reasons, "%s", d.Body)
		got[d.Type]++
	}
	return got
}

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tWriter sends log lines to t.Log, so they show only for failed tests.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
