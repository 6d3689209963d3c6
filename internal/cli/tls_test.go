package cli

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// tlsOps is RabbitMQ behind a TLS-terminating proxy (certificate for
// mq.internal from a private CA, client certificate required) and the
// PEM files an operator names in amqp.tls_*.
type tlsOps struct {
	px                           *tlstest.Terminator
	url, ca, stranger, cert, key string
	keyPEM                       []byte
}

func newTLSOps(t *testing.T) *tlsOps {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp Root CA")
	px := tlstest.NewTerminator(t, tlstest.ServerConfig(ca.Server(t, "mq.internal"), ca), testproxy.HostPort(t, brokertest.URL(), "5672"))
	u, err := url.Parse(brokertest.URL())
	require.NoError(t, err)
	u.Scheme, u.Host = "amqps", px.Addr
	leaf := ca.Client(t, "mailsvc")
	cert, key := leaf.WriteFiles(t, dir, "client")
	return &tlsOps{px: px, url: u.String(), ca: ca.WriteFile(t, dir, "ca.pem"),
		stranger: tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem"), cert: cert, key: key, keyPEM: leaf.KeyPEM}
}

// config writes the operator's config for the proxy with CA file ca.
func (o *tlsOps) config(t *testing.T, n *brokertest.Names, ca string) string {
	t.Helper()
	// A schema of its own: dlq replay writes its audit row.
	return writeOpsConfig(t, storetest.New(t).URL, o.url, n, fmt.Sprintf(
		"amqp:\n  tls_ca_file: %q\n  tls_cert_file: %q\n  tls_key_file: %q\n  tls_server_name: mq.internal\n", ca, o.cert, o.key))
}

// emit and dlq replay connect through amqp.tls_* like the daemon: over
// TLS, with the client certificate; with the wrong CA they exit 5 naming
// amqp.tls_ca_file and nothing reaches RabbitMQ.
func TestOperatorCommandsUseAMQPTLS(t *testing.T) {
	t.Parallel()
	o := newTLSOps(t)
	n := brokertest.New(t)
	dlqTopology(t, n, nil)
	cfg := o.config(t, n, o.ca)

	out, err := runCLI(t, cfg, "emit", "order-confirmed", "--order-id", "51", "--count", "2")
	require.NoError(t, err)
	require.Contains(t, out, "published 2 OrderConfirmed events")
	require.Len(t, drain(t, n.Queue), 2)

	seedDLQ(t, n)
	out, err = runCLI(t, cfg, "dlq", "replay")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 2 of 2 dead-lettered messages")
	require.Equal(t, 0, depth(t, n.DeadLetterQueue))
	require.Equal(t, []string{"mailsvc", "mailsvc"}, o.px.Peers(), "emit and dlq replay, each with the client certificate")

	forwarded := o.px.Forwarded()
	bad := o.config(t, n, o.stranger)
	for _, args := range [][]string{{"emit", "order-confirmed", "--order-id", "52"}, {"dlq", "replay"}} {
		_, err := runCLI(t, bad, args...)
		require.Equal(t, ExitUnavailable, ExitCode(err), args)
		require.ErrorContains(t, err, "not signed by a CA of amqp.tls_ca_file", args)
		require.ErrorContains(t, err, "check amqp.url and amqp.tls_*", args)
	}
	require.Equal(t, 2, o.px.Sessions(), "no refused command reached RabbitMQ")
	require.Equal(t, forwarded, o.px.Forwarded())
}

// config check lists each certificate with its expiry and no key
// material; a bad TLS file is exit 2 naming its key.
func TestConfigCheckReportsCertificates(t *testing.T) {
	t.Parallel()
	o := newTLSOps(t)
	n := &brokertest.Names{InputExchange: "i", Queue: "q", DeadLetterExchange: "d", DeadLetterQueue: "dq", EventsExchange: "e"}
	cfg := writeOpsConfig(t, "postgres://mailsvc:dbpw-S3cret@db.internal/mailsvc?sslmode=verify-full&sslrootcert="+o.ca+
		"&sslcert="+o.cert+"&sslkey="+o.key, o.url, n, fmt.Sprintf(
		"amqp:\n  tls_ca_file: %q\n  tls_cert_file: %q\n  tls_key_file: %q\n", o.ca, o.cert, o.key))
	out, err := runCLI(t, cfg, "config", "check")
	require.NoError(t, err)
	require.Contains(t, out, "# certificates (read at start):\n")
	for _, key := range []string{"amqp.tls_ca_file " + o.ca, "amqp.tls_cert_file " + o.cert,
		"database.url (sslrootcert) " + o.ca, "database.url (sslcert) " + o.cert} {
		require.Contains(t, out, "#   "+key+": ", key)
	}
	require.Contains(t, out, ": CN=mailsvc (issuer CN=Corp Root CA,O=mailsvc tests), expires ")
	require.Regexp(t, `expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(0 days left, renew soon\)`, out)
	require.Contains(t, out, "sslmode=verify-full&sslrootcert=", "the libpq TLS parameters are shown")
	require.NotContains(t, out, "dbpw-S3cret")
	require.NotContains(t, out, strings.Split(string(o.keyPEM), "\n")[1], "key material")

	bad := writeOpsConfig(t, storetest.URL(), o.url, n, fmt.Sprintf("amqp:\n  tls_cert_file: %q\n  tls_key_file: %q\n", o.cert, o.ca))
	_, err = runCLI(t, bad, "config", "check")
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, "amqp.tls_key_file: "+o.ca+" holds no PEM private key")
}

// mailsvc migrate runs over database.url's TLS parameters (verify-full, a
// private CA, a client certificate) against a PostgreSQL that accepts
// nothing else; with the wrong sslrootcert it exits 5 naming it.
func TestMigrateOverPostgresTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp DB CA")
	pg := tlstest.StartPostgres(t, tlstest.PostgresOptions{Server: ca.Server(t, "localhost"), ClientCA: ca, User: "mailsvc"})
	crt, key := ca.Client(t, "mailsvc").WriteFiles(t, dir, "client")
	caFile := ca.WriteFile(t, dir, "ca.pem")
	dbURL := func(root string) string {
		return fmt.Sprintf("postgres://mailsvc@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s",
			pg.Port, root, crt, key)
	}
	n := &brokertest.Names{InputExchange: "i", Queue: "q", DeadLetterExchange: "d", DeadLetterQueue: "dq", EventsExchange: "e"}
	cfg := writeOpsConfig(t, dbURL(caFile), brokertest.URL(), n, "")
	out, err := runCLI(t, cfg, "migrate")
	require.NoError(t, err)
	require.Contains(t, out, "applied")
	out, err = runCLI(t, cfg, "migrate", "status")
	require.NoError(t, err)
	require.NotContains(t, out, "pending")

	stranger := tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem")
	_, err = runCLI(t, writeOpsConfig(t, dbURL(stranger), brokertest.URL(), n, ""), "migrate", "status")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "not signed by a CA of database.url (sslrootcert)")
}
