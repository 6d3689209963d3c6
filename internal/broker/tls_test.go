package broker_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// tlsBroker is the test RabbitMQ behind a TLS-terminating proxy whose
// certificate, for mq.internal only, comes from a private CA, and which
// requires a client certificate of that CA.
type tlsBroker struct {
	px                            *tlstest.Terminator
	url                           string
	caFile, strangerCA, cert, key string
}

func newTLSBroker(t *testing.T) *tlsBroker {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp Root CA")
	px := tlstest.NewTerminator(t, tlstest.ServerConfig(ca.Server(t, "mq.internal"), ca), testproxy.HostPort(t, brokertest.URL(), "5672"))
	u, err := url.Parse(brokertest.URL())
	require.NoError(t, err)
	u.Scheme, u.Host = "amqps", px.Addr
	cert, key := ca.Client(t, "mailsvc").WriteFiles(t, dir, "client")
	return &tlsBroker{px: px, url: u.String(), caFile: ca.WriteFile(t, dir, "ca.pem"),
		strangerCA: tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem"), cert: cert, key: key}
}

func (b *tlsBroker) config(t *testing.T, src tlsconfig.Source) broker.Config {
	t.Helper()
	src.Keys = tlsconfig.KeysOf("amqp")
	tc, _, err := tlsconfig.Client(src, time.Now())
	require.NoError(t, err)
	return broker.Config{URL: b.url, Name: "mailsvc-tls-test", TLS: tc, DialTimeout: 5 * time.Second}
}

// Through a TLS-terminating proxy that requires a client certificate,
// mailsvc's connection declares, publishes and gets; a wrong CA, a
// missing client certificate or a name mismatch fails the dial with a
// hint naming the amqp.tls_* key, and not one byte reaches RabbitMQ.
func TestAMQPSWithPrivateCAAndClientCertificate(t *testing.T) {
	t.Parallel()
	b := newTLSBroker(t)
	n := brokertest.New(t)
	good := tlsconfig.Source{CAFile: b.caFile, CertFile: b.cert, KeyFile: b.key, ServerName: "mq.internal"}
	conn, err := broker.Dial(b.config(t, good))
	require.NoError(t, err)
	require.NoError(t, conn.Declare(broker.Topology{
		{Exchange: n.InputExchange, Queue: broker.Queue{Name: n.Queue, DeliveryLimit: 5}, BindingKeys: []string{"#"}},
	}))
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, broker.Message{Exchange: n.InputExchange, RoutingKey: "a.b", MessageID: "m-tls",
		ContentType: "application/json", Body: []byte(`{}`), Mandatory: true, Persistent: true}))
	pub.Close()
	g, err := broker.NewGetter(conn)
	require.NoError(t, err)
	got, ok, err := g.Get(n.Queue)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "m-tls", got.MessageID)
	g.Close()
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return b.px.Open() == 0 }, 10*time.Second, 5*time.Millisecond,
		"the proxy copied the last frames of the closed connection")
	require.Equal(t, 1, b.px.Sessions())
	require.Equal(t, []string{"mailsvc"}, b.px.Peers())
	forwarded := b.px.Forwarded()
	require.Positive(t, forwarded)

	for name, c := range map[string]struct {
		src  tlsconfig.Source
		hint string
	}{
		"wrong CA":            {tlsconfig.Source{CAFile: b.strangerCA, CertFile: b.cert, KeyFile: b.key, ServerName: "mq.internal"}, "not signed by a CA of amqp.tls_ca_file"},
		"missing client cert": {tlsconfig.Source{CAFile: b.caFile, ServerName: "mq.internal"}, "requires a client certificate signed by a CA it trusts: set amqp.tls_cert_file and amqp.tls_key_file"},
		"name mismatch":       {tlsconfig.Source{CAFile: b.caFile, CertFile: b.cert, KeyFile: b.key}, `not valid for "127.0.0.1": set amqp.tls_server_name`},
	} {
		_, err := broker.Dial(b.config(t, c.src))
		require.Error(t, err, name)
		t.Logf("%s: %v", name, err)
		require.ErrorContains(t, err, c.hint, name)
		require.NotContains(t, err.Error(), "guest:guest", "the URL's password stays out")
	}
	require.Equal(t, 1, b.px.Sessions(), "no refused client reached RabbitMQ")
	require.Equal(t, forwarded, b.px.Forwarded(), "nothing was sent in clear")
	require.Eventually(t, func() bool { return b.px.Refused() == 3 }, 5*time.Second, 5*time.Millisecond,
		"the proxy saw three failed handshakes (it records a failure once the client has hung up)")

	plain := b.config(t, good)
	plain.URL = brokertest.URL()
	_, err = broker.Dial(plain)
	require.ErrorContains(t, err, "a TLS configuration is set but the URL is amqp:// (plaintext): use amqps://")
}
