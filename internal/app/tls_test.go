package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// privateInfra is an SMTP relay and a RabbitMQ (behind a TLS-terminating
// proxy) whose certificates, for relay.internal and mq.internal, come
// from a private CA, both requiring a client certificate of that CA; env
// is the configuration an operator writes for them.
type privateInfra struct {
	smtp     *smtptest.Server
	mq       *tlstest.Terminator
	env      map[string]string
	keyPEM   []byte
	stranger string
}

func newPrivateInfra(t *testing.T) *privateInfra {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp Root CA")
	client := ca.Client(t, "mailsvc")
	cert, key := client.WriteFiles(t, dir, "mailsvc")
	caFile := ca.WriteFile(t, dir, "corp-ca.pem")
	srv := smtptest.New(t, smtptest.Options{STARTTLS: true, Username: "mailer", Password: smtpSecret,
		TLSConfig: tlstest.ServerConfig(ca.Server(t, "relay.internal"), ca)})
	mq := tlstest.NewTerminator(t, tlstest.ServerConfig(ca.Server(t, "mq.internal"), ca), testproxy.HostPort(t, brokertest.URL(), "5672"))
	u, err := url.Parse(brokertest.URL())
	require.NoError(t, err)
	u.Scheme, u.Host = "amqps", mq.Addr
	return &privateInfra{smtp: srv, mq: mq, keyPEM: client.KeyPEM,
		stranger: tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem"),
		env: map[string]string{
			"MAILSVC_SMTP_HOST": srv.Host, "MAILSVC_SMTP_PORT": fmt.Sprint(srv.Port), "MAILSVC_SMTP_TLS": "starttls",
			"MAILSVC_SMTP_TLS_CA_FILE": caFile, "MAILSVC_SMTP_TLS_CERT_FILE": cert, "MAILSVC_SMTP_TLS_KEY_FILE": key,
			"MAILSVC_SMTP_TLS_SERVER_NAME": "relay.internal",
			"MAILSVC_AMQP_URL":             u.String(), "MAILSVC_AMQP_TLS_CA_FILE": caFile,
			"MAILSVC_AMQP_TLS_CERT_FILE": cert, "MAILSVC_AMQP_TLS_KEY_FILE": key, "MAILSVC_AMQP_TLS_SERVER_NAME": "mq.internal",
		}}
}

// The real wiring against private infrastructure: the consumer and the
// relay connect to RabbitMQ over TLS with the client certificate (two
// sessions through the proxy, both as CN=mailsvc), the sender delivers over
// STARTTLS with it, and the EmailSent event comes back through the relay.
// No log line carries the private key.
func TestServeOverTLSToPrivateInfrastructure(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	in := newPrivateInfra(t)
	events := brokertest.Observe(t, n.EventsExchange, n.EventsQueue, "#")
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	d := startDaemon(t, secretConfig(t, sc, px.Addr, n, in.env))
	require.Eventually(t, func() bool { c, _ := get(t, d.http.addr, "/readyz"); return c == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "ready once the consumer's channel is open over TLS")

	publishRaw(t, confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000000c1", "91"))
	got := events.WaitFor(t, 1)
	require.Len(t, got, 1)
	require.Equal(t, "EmailSent", got[0].Type)
	msgs := in.smtp.Messages()
	require.Len(t, msgs, 1)
	require.True(t, msgs[0].TLS)
	require.Equal(t, "mailsvc", msgs[0].ClientCert)
	logs := d.logs.String()
	// The consumer's and the relay's connections, one more for each
	// reconnect the daemon logged, and perhaps the queue-stats reader's: it
	// dials within a second of the relay taking the lease, which a slow
	// machine lets happen before the mail is through (a make test once
	// counted 3).
	reconnects := strings.Count(logs, "broker connection lost, reconnecting")
	sessions := in.mq.Sessions()
	require.GreaterOrEqual(t, sessions, 2, "the consumer's and the relay's connections")
	require.LessOrEqual(t, sessions, 3+reconnects, "the consumer's, the relay's, the queue-stats reader's and %d reconnects", reconnects)
	for _, peer := range in.mq.Peers() {
		require.Equal(t, "mailsvc", peer, "every session presents the client certificate")
	}
	require.Zero(t, in.mq.Refused())
	require.NotContains(t, logs, strings.Split(string(in.keyPEM), "\n")[1], "key material in the logs")
	requireNoSecret(t, "logs", logs)
}

// An SMTP relay whose certificate does not chain to smtp.tls_ca_file: the
// mail is not sent and stays pending, and its last_error names the key to
// fix; no mail command reached the relay.
func TestSMTPCertificateFailureNamesTheKey(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	in := newPrivateInfra(t)
	in.env["MAILSVC_SMTP_TLS_CA_FILE"] = in.stranger
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	d := startDaemon(t, secretConfig(t, sc, px.Addr, n, in.env))
	require.Eventually(t, func() bool { c, _ := get(t, d.http.addr, "/readyz"); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	publishRaw(t, confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000000c2", "92"))
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'pending' AND attempts >= 1
			AND last_error LIKE '%not signed by a CA of smtp.tls_ca_file%'`) == 1
	}, 30*time.Second, 50*time.Millisecond, "the mail waits with the hint in last_error")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.Zero(t, in.smtp.MailCommands())
	require.Zero(t, in.smtp.Count())
}

// serve logs each certificate it read at start, as a warning when it
// expires within 30 days, never the key; secretsOf keeps the database
// key's passphrase out of error texts.
func TestStartLogsCertificatesAndHidesTheKeyPassphrase(t *testing.T) {
	t.Parallel()
	in := newPrivateInfra(t)
	env := map[string]string{"MAILSVC_MAIL_FROM": "Shop <orders@shop.example>",
		"MAILSVC_DATABASE_URL": "postgres://u@h/db?sslmode=verify-full&sslpassword=Pass-Phrase-9"}
	for k, v := range in.env {
		if strings.HasPrefix(k, "MAILSVC_SMTP_") {
			env[k] = v
		}
	}
	cfg, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	logs := &syncBuffer{}
	logCertificates(cfg, slog.New(slog.NewJSONHandler(logs, nil)), time.Now())
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, "the CA and the client certificate")
	require.Contains(t, lines[0], `"level":"WARN","msg":"tls certificate expires soon: renew it","key":"smtp.tls_ca_file"`)
	require.Contains(t, lines[1], `"key":"smtp.tls_cert_file"`)
	require.Contains(t, lines[1], `"subject":"CN=mailsvc"`)
	require.NotContains(t, logs.String(), strings.Split(string(in.keyPEM), "\n")[1])

	logs = &syncBuffer{}
	logCertificates(cfg, slog.New(slog.NewJSONHandler(logs, nil)), time.Now().Add(-60*24*time.Hour))
	require.Contains(t, logs.String(), `"level":"INFO","msg":"tls certificate"`)
	require.Contains(t, secretsOf(cfg), "Pass-Phrase-9")
	require.NotContains(t, cfg.Database.URL.String(), "Pass-Phrase-9")
}
