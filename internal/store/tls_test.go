package store_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// sslRequest is the 8-byte SSLRequest a PostgreSQL client sends in clear
// before the TLS handshake (protocol: length 8, code 80877103).
var sslRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// tlsPostgres is a PostgreSQL of the test's own with ssl=on, a server
// certificate for localhost from a private CA, and pg_hba accepting only
// TLS with a client certificate of that CA whose CN is the role; clients
// reach it through a Recorder that keeps every byte they send.
type tlsPostgres struct {
	pg                     *tlstest.Postgres
	rec                    *tlstest.Recorder
	ca, stranger, crt, key string
}

const tlsRole = "mailsvc_tls"

func newTLSPostgres(t *testing.T) *tlsPostgres {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp DB CA")
	pg := tlstest.StartPostgres(t, tlstest.PostgresOptions{Server: ca.Server(t, "localhost"), ClientCA: ca, User: tlsRole})
	crt, key := ca.Client(t, tlsRole).WriteFiles(t, dir, "client")
	return &tlsPostgres{pg: pg, rec: tlstest.NewRecorder(t, pg.Addr), ca: ca.WriteFile(t, dir, "ca.pem"),
		stranger: tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem"), crt: crt, key: key}
}

// url is the database URL an operator writes, through the recorder to
// host (localhost is the name the server's certificate carries), with the
// libpq TLS parameters.
func (p *tlsPostgres) url(host string, params url.Values) string {
	_, port, _ := net.SplitHostPort(p.rec.Addr)
	return (&url.URL{Scheme: "postgres", User: url.User(tlsRole), Host: host + ":" + port, Path: "/postgres",
		RawQuery: params.Encode()}).String()
}

func (p *tlsPostgres) params(rootCert, cert, key string) url.Values {
	v := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {rootCert}, "connect_timeout": {"10"}}
	if cert != "" {
		v.Set("sslcert", cert)
		v.Set("sslkey", key)
	}
	return v
}

// TestPostgresTLSEndToEnd runs every kind of connection mailsvc opens —
// the pool, migrations on it, the relay's own pool (relay lease) and the
// outbox listener's dedicated connection — against a PostgreSQL that
// takes only TLS with a client certificate, with database.url's
// sslmode=verify-full, sslrootcert, sslcert and sslkey. Each connection is
// TLS with the client certificate on the server's side. A wrong CA, a
// missing client certificate or a host the certificate is not valid for
// is refused with a message naming the parameter, and no startup message
// (user name, database) ever crossed the wire in clear.
func TestPostgresTLSEndToEnd(t *testing.T) {
	t.Parallel()
	p := newTLSPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := p.url("localhost", p.params(p.ca, p.crt, p.key))

	st, err := store.Open(ctx, store.Options{URL: good, MaxConns: 4})
	require.NoError(t, err)
	defer st.Close()
	applied, err := st.MigrateUp(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	require.NoError(t, st.CheckSchema(ctx))

	relayDB, err := st.OpenRelay("mailsvc-relay-tls", 5*time.Second)
	require.NoError(t, err)
	defer relayDB.Close()
	epoch, held, err := relayDB.AcquireLease(ctx, "relay-tls", 10*time.Second)
	require.NoError(t, err)
	require.True(t, held)
	require.EqualValues(t, 1, epoch)

	l, err := st.ListenOutbox(ctx, "mailsvc-listen-tls")
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, storetest.InsertOutbox(ctx, st, store.Feedback{Type: "EmailSent", DedupeKey: "order-confirmed:1",
		OrderID: "1", Template: "order_confirmed", Status: "sent", Attempts: 1, Provider: "smtp"}))
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, l.Wait(wctx), "the listener's TLS connection receives the outbox notification")
	wcancel()

	// On the server's side: every client connection is TLS, as CN=mailsvc_tls.
	var tlsConns, plainConns int
	require.NoError(t, st.TestSupport().Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE s.ssl AND s.client_dn = '/CN=`+tlsRole+`'), count(*) FILTER (WHERE NOT s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.backend_type = 'client backend' AND a.application_name IN ('mailsvc-relay-tls', 'mailsvc-listen-tls', '')`).
		Scan(&tlsConns, &plainConns))
	require.GreaterOrEqual(t, tlsConns, 3, "pool, relay pool and listener")
	require.Zero(t, plainConns)
	var names int
	require.NoError(t, st.TestSupport().Pool.QueryRow(ctx, `SELECT count(DISTINCT application_name) FROM pg_stat_activity a
		JOIN pg_stat_ssl s USING (pid) WHERE s.ssl AND application_name IN ('mailsvc-relay-tls', 'mailsvc-listen-tls')`).Scan(&names))
	require.Equal(t, 2, names, "the relay's pool and the listener are TLS connections")

	for name, c := range map[string]struct {
		url  string
		hint string
	}{
		"wrong CA":            {p.url("localhost", p.params(p.stranger, p.crt, p.key)), "not signed by a CA of database.url (sslrootcert)"},
		"missing client cert": {p.url("localhost", p.params(p.ca, "", "")), "requires a client certificate: set sslcert and sslkey in database.url"},
		"name mismatch":       {p.url("127.0.0.1", p.params(p.ca, p.crt, p.key)), `not valid for "127.0.0.1": set database.url (host)`},
	} {
		_, err := store.Open(ctx, store.Options{URL: c.url, MaxConns: 1})
		require.Error(t, err, name)
		t.Logf("%s: %v", name, err)
		var explained *tlsconfig.Explained
		require.True(t, errors.As(err, &explained), "%s: explained", name)
		require.ErrorContains(t, err, c.hint, name)
	}

	sent := p.rec.Sent()
	require.True(t, bytes.HasPrefix(sent, sslRequest), "the first bytes are the SSLRequest")
	require.False(t, bytes.Contains(sent, []byte("user\x00"+tlsRole)), "a startup message went in clear")
	require.False(t, bytes.Contains(sent, []byte("pg_stat_ssl")), "a query went in clear")
	require.GreaterOrEqual(t, p.rec.Connections(), 6)
}
