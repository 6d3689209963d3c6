package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

// Known secrets fed through the config; none may ever be seen outside.
const (
	smtpSecret   = "smtp-S3cret-hunter2"
	resendSecret = "re_S3cretKey_4f9a"
	dbSecret     = "dbS3cretPw-77"
	// hookSecret is the Resend webhook signing secret; hookKey its key.
	hookKey    = "S3cretWebhookKey9a8b7c6d5e4f3a2b"
	hookSecret = "whsec_" + hookKey
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is a running set of components built by the real wiring.
type daemon struct {
	cfg   *config.Config
	store *store.Store
	parts []named
	http  *httpServer
	logs  *syncBuffer
}

// secretConfig loads a config whose secrets are the known ones and whose
// database URL (with dbSecret as password) goes through dbAddr.
func secretConfig(t testing.TB, sc *storetest.Schema, dbAddr string, n *brokertest.Names, extra map[string]string) *config.Config {
	t.Helper()
	dbURL := strings.Replace(sc.URL, "postgres://postgres@", "postgres://postgres:"+dbSecret+"@", 1)
	px := &testproxy.Proxy{Addr: dbAddr}
	env := map[string]string{
		"MAILSVC_DATABASE_URL": px.RewriteURL(t, dbURL), "MAILSVC_AMQP_URL": brokertest.URL(),
		"MAILSVC_AMQP_INPUT_EXCHANGE": n.InputExchange, "MAILSVC_AMQP_QUEUE": n.Queue,
		"MAILSVC_AMQP_DEAD_LETTER_EXCHANGE": n.DeadLetterExchange, "MAILSVC_AMQP_DEAD_LETTER_QUEUE": n.DeadLetterQueue,
		"MAILSVC_AMQP_EVENTS_EXCHANGE": n.EventsExchange, "MAILSVC_HTTP_ADDR": "127.0.0.1:0",
		"MAILSVC_MAIL_FROM": "Shop <orders@shop.example>", "MAILSVC_LOG_LEVEL": "debug",
		"MAILSVC_SMTP_PASSWORD": smtpSecret, "MAILSVC_SMTP_USERNAME": "mailer", "MAILSVC_RESEND_API_KEY": resendSecret,
		"MAILSVC_WEBHOOKS_ADDR": "127.0.0.1:0", "MAILSVC_WEBHOOKS_RESEND_SECRET": hookSecret,
	}
	for k, v := range extra {
		env[k] = v
	}
	cfg, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Contains(t, cfg.Database.URL.Reveal(), dbSecret)
	return cfg
}

// startDaemon builds the components with the real wiring and starts them;
// they stop at cleanup.
func startDaemon(t testing.TB, cfg *config.Config) *daemon {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := open(ctx, cfg, log, 8)
	require.NoError(t, err)
	st := w.store
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.reg = reg
	require.NoError(t, w.resolveNamespace(ctx))
	w.tracing, err = setupTracing(ctx, cfg, log)
	require.NoError(t, err)
	parts, err := w.build()
	require.NoError(t, err)
	d := &daemon{cfg: cfg, store: st, logs: logs, http: parts[0].c.(*httpServer)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := len(d.parts) - 1; i >= 0; i-- {
			require.NoError(t, d.parts[i].c.Stop(ctx), d.parts[i].name)
		}
		st.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	for _, p := range parts {
		require.NoError(t, p.c.Start(context.Background()), p.name)
		d.parts = append(d.parts, p)
	}
	return d
}

// part returns the started component called name.
func (d *daemon) part(t testing.TB, name string) Component {
	t.Helper()
	for _, p := range d.parts {
		if p.name == name {
			return p.c
		}
	}
	t.Fatalf("no component %s", name)
	return nil
}

func requireNoSecret(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range []string{smtpSecret, resendSecret, dbSecret, hookKey} {
		require.NotContains(t, text, s, "%s leaks a secret", where)
	}
}

// TestKnownSecretNeverLeaks feeds known secrets through the config
// (smtp.password, resend.api_key, the database URL's password) and drives
// the error paths that exist: the database cut under the daemon (readyz,
// stats refresh, store errors), a failing start, then greps every output.
func TestKnownSecretNeverLeaks(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	cfg := secretConfig(t, sc, px.Addr, brokertest.New(t), nil)
	d := startDaemon(t, cfg)
	slog.New(slog.NewJSONHandler(d.logs, nil)).Info("effective config", "config", cfg, "database_url", cfg.Database.URL)

	var metrics string
	require.Eventually(t, func() bool {
		_, metrics = get(t, d.http.addr, "/metrics")
		return !strings.Contains(metrics, "mailsvc_stats_last_refresh_timestamp_seconds 0\n")
	}, 10*time.Second, 20*time.Millisecond, "the first refresh runs at start")
	require.Contains(t, metrics, `mailsvc_mails{status="pending"} 0`)
	require.Contains(t, metrics, "go_goroutines")

	// The webhook listener runs apart from the probes and refuses what is
	// not signed with the secret, counting it.
	hooks := d.part(t, "webhooks").(*webhook.Server)
	require.NotEqual(t, d.http.addr, hooks.Addr())
	for _, sig := range []string{"", "v1,bm90IGEgc2lnbmF0dXJl"} {
		req, err := http.NewRequest(http.MethodPost, "http://"+hooks.Addr()+"/webhooks/resend", strings.NewReader(`{"type":"email.delivered"}`))
		require.NoError(t, err)
		req.Header.Set("svix-id", "msg_1")
		req.Header.Set("svix-timestamp", fmt.Sprint(time.Now().Unix()))
		req.Header.Set("svix-signature", sig)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		require.NoError(t, res.Body.Close())
	}
	code, _ := get(t, hooks.Addr(), "/metrics")
	require.Equal(t, http.StatusNotFound, code, "the webhook listener serves no metrics")
	_, metrics = get(t, d.http.addr, "/metrics")
	require.Contains(t, metrics, `mailsvc_webhooks_received_total{provider="resend",result="bad_signature"} 2`)

	px.Cut()
	code, ready := get(t, d.http.addr, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	d.part(t, "stats").(*stats.Collector).Refresh(context.Background())
	_, err := d.store.MailByKey(context.Background(), "order-confirmed:1")
	require.Error(t, err)
	_, metricsCut := get(t, d.http.addr, "/metrics")
	require.NotContains(t, metricsCut, "mailsvc_stats_refresh_errors_total 0")

	// Serve itself with the database unreachable.
	serveErr := Serve(context.Background(), cfg, slog.New(slog.NewJSONHandler(d.logs, nil)))
	require.Error(t, serveErr)
	px.Restore(t)

	logs := d.logs.String()
	require.Contains(t, logs, `"msg":"refresh database gauges"`)
	require.Contains(t, logs, "<redacted>")
	for where, text := range map[string]string{
		"logs": logs, "/metrics": metrics + metricsCut, "/readyz": ready, "store error": err.Error(), "Serve error": serveErr.Error(),
	} {
		requireNoSecret(t, where, text)
	}
}

// TestKnownSecretStaysOutOfLastError sends a mail through the real wiring
// to an SMTP server that authenticates with the known password and then
// rejects MAIL FROM with a reply echoing it (as a misconfigured relay
// might): the mail fails, and neither last_error, the feedback event nor
// the logs carry the password.
func TestKnownSecretStaysOutOfLastError(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	srv.Inject(smtptest.Mail, smtptest.Reply(550, "5.7.1 relay denied for mailer:"+smtpSecret+" key "+resendSecret))
	d := startDaemon(t, secretConfig(t, sc, px.Addr, n, map[string]string{
		"MAILSVC_SMTP_HOST": srv.Host, "MAILSVC_SMTP_PORT": fmt.Sprint(srv.Port), "MAILSVC_SMTP_TLS": "none",
	}))
	require.Eventually(t, func() bool { c, _ := get(t, d.http.addr, "/readyz"); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	publishRaw(t, confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000000aa", "7"))

	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND last_error <> ''`) == 1
	}, 30*time.Second, 50*time.Millisecond, "the 550 fails the mail for good")
	m, err := d.store.MailByKey(context.Background(), "order-confirmed:7")
	require.NoError(t, err)
	require.Contains(t, m.LastError, "relay denied")
	require.Len(t, m.Feedback, 1)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed'
		AND position($1 in payload::text) = 0 AND position($2 in payload::text) = 0 AND position($3 in payload::text) = 0`,
		smtpSecret, resendSecret, dbSecret))
	requireNoSecret(t, "last_error", m.LastError)
	_, metrics := get(t, d.http.addr, "/metrics")
	requireNoSecret(t, "/metrics", metrics)
	requireNoSecret(t, "logs", d.logs.String())
}

// The management API's password (amqp.management_url) is a secret too:
// a management API that refuses it, and the effective config in the logs,
// never show it.
func TestManagementPasswordNeverLeaks(t *testing.T) {
	t.Parallel()
	const mgmtSecret = "mgmt-S3cret-pw-91"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"not_authorised","reason":"Login failed"}`))
	}))
	defer api.Close()
	sc := storetest.New(t)
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	cfg := secretConfig(t, sc, px.Addr, brokertest.New(t), map[string]string{
		"MAILSVC_AMQP_MANAGEMENT_URL": strings.Replace(api.URL, "http://", "http://monitor:"+mgmtSecret+"@", 1),
	})
	require.Contains(t, secretsOf(cfg), mgmtSecret, "error texts are scrubbed of it")
	d := startDaemon(t, cfg)
	slog.New(slog.NewJSONHandler(d.logs, nil)).Info("effective config", "config", cfg)
	require.Eventually(t, func() bool {
		return strings.Contains(d.logs.String(), "reading the queues from the broker failed")
	}, 30*time.Second, 20*time.Millisecond, "the relay leader reads the management API")
	logs := d.logs.String()
	require.Contains(t, logs, "401 Unauthorized")
	require.NotContains(t, logs, mgmtSecret)
	_, metrics := get(t, d.http.addr, "/metrics")
	require.NotContains(t, metrics, mgmtSecret)
	require.NotContains(t, metrics, `mailsvc_queue_messages{`, "no queue series from a read that failed")
}
