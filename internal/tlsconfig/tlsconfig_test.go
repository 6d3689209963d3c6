package tlsconfig_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

var keys = tlsconfig.KeysOf("smtp")

// pki is a private CA with a server certificate for localhost and
// 127.0.0.1 and a client certificate, written into dir.
type pki struct {
	dir               string
	ca, other         *tlstest.CA
	server, client    *tlstest.Leaf
	caFile, otherFile string
	certFile, keyFile string
	serverMutual      *tls.Config
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: tlstest.NewCA(t, "Test Root CA"), other: tlstest.NewCA(t, "Other CA")}
	p.server = p.ca.Server(t, "localhost", "127.0.0.1")
	p.client = p.ca.Client(t, "mailsvc")
	p.caFile = p.ca.WriteFile(t, p.dir, "ca.pem")
	p.otherFile = p.other.WriteFile(t, p.dir, "other.pem")
	p.certFile, p.keyFile = p.client.WriteFiles(t, p.dir, "client")
	p.serverMutual = tlstest.ServerConfig(p.server, p.ca)
	return p
}

func TestClientReadsTheFiles(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	c, certs, err := tlsconfig.Client(tlsconfig.Source{Keys: keys, CAFile: p.caFile, CertFile: p.certFile,
		KeyFile: p.keyFile, ServerName: "mail.internal"}, time.Now())
	require.NoError(t, err)
	require.EqualValues(t, tls.VersionTLS12, c.MinVersion)
	require.Equal(t, "mail.internal", c.ServerName)
	require.False(t, c.InsecureSkipVerify)
	require.NotNil(t, c.RootCAs)
	require.Len(t, c.Certificates, 1)
	require.Len(t, certs, 2)
	require.Equal(t, "smtp.tls_ca_file", certs[0].Key)
	require.Equal(t, p.caFile, certs[0].File)
	require.Contains(t, certs[0].Subject, "CN=Test Root CA")
	require.Equal(t, "smtp.tls_cert_file", certs[1].Key)
	require.Contains(t, certs[1].Subject, "CN=mailsvc")
	require.Contains(t, certs[1].Issuer, "CN=Test Root CA")
	require.WithinDuration(t, p.client.Cert.NotAfter, certs[1].NotAfter, 0)

	none, certs, err := tlsconfig.Client(tlsconfig.Source{Keys: keys}, time.Now())
	require.NoError(t, err)
	require.Nil(t, none.RootCAs, "no CA file: the system roots")
	require.Empty(t, certs)
}

// Every bad file is refused with the key it is about, and no message
// quotes the key material.
func TestClientRefusesBadFilesNamingTheKey(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	write := func(name, body string) string {
		f := filepath.Join(p.dir, name)
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		return f
	}
	expired := p.ca.Issue(t, tlstest.Spec{CommonName: "old", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	oldCert, oldKey := expired.WriteFiles(t, p.dir, "old")
	other := p.ca.Client(t, "other")
	_, otherKey := other.WriteFiles(t, p.dir, "other-client")
	garbage := write("garbage.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	for name, c := range map[string]struct {
		src  tlsconfig.Source
		want []string
	}{
		"missing CA file":     {tlsconfig.Source{CAFile: filepath.Join(p.dir, "nope.pem")}, []string{"smtp.tls_ca_file: open ", "no such file"}},
		"CA file without PEM": {tlsconfig.Source{CAFile: write("empty.pem", "not pem\n")}, []string{"smtp.tls_ca_file: ", "holds no PEM certificate"}},
		"CA file unparsable":  {tlsconfig.Source{CAFile: garbage}, []string{"smtp.tls_ca_file: ", "certificate 1"}},
		"key as CA":           {tlsconfig.Source{CAFile: p.keyFile}, []string{"smtp.tls_ca_file: ", "holds a private key"}},
		"cert without key":    {tlsconfig.Source{CertFile: p.certFile}, []string{"smtp.tls_key_file: is required with smtp.tls_cert_file"}},
		"key without cert":    {tlsconfig.Source{KeyFile: p.keyFile}, []string{"smtp.tls_cert_file: is required with smtp.tls_key_file"}},
		"key of another cert": {tlsconfig.Source{CertFile: p.certFile, KeyFile: otherKey},
			[]string{"smtp.tls_key_file: " + otherKey + " is not the private key of smtp.tls_cert_file"}},
		"cert as key":           {tlsconfig.Source{CertFile: p.certFile, KeyFile: p.certFile}, []string{"smtp.tls_key_file: ", "holds no PEM private key"}},
		"expired client cert":   {tlsconfig.Source{CertFile: oldCert, KeyFile: oldKey}, []string{"smtp.tls_cert_file: " + oldCert + " expired at "}},
		"server name with port": {tlsconfig.Source{ServerName: "mail:587"}, []string{"smtp.tls_server_name: \"mail:587\" is not a host name"}},
	} {
		t.Run(name, func(t *testing.T) {
			c.src.Keys = keys
			cfg, _, err := tlsconfig.Client(c.src, time.Now())
			require.Error(t, err)
			require.Nil(t, cfg)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			for _, pem := range [][]byte{p.client.KeyPEM, other.KeyPEM, expired.KeyPEM} {
				body := strings.Split(string(pem), "\n")[1]
				require.NotContains(t, err.Error(), body, "an error quotes key material")
			}
		})
	}
}

// handshake runs a client handshake against a TLS server on a loopback
// port and returns the client's error, reading once so that a TLS 1.3
// server's refusal of the client certificate arrives.
func handshake(t *testing.T, server *tls.Config, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if c.(*tls.Conn).Handshake() == nil {
			_, _ = c.Write([]byte("ok"))
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 2))
		_ = c.Close()
	}
	<-done
	return err
}

func TestExplainNamesTheKeyToFix(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	load := func(src tlsconfig.Source) *tls.Config {
		src.Keys = keys
		c, _, err := tlsconfig.Client(src, time.Now())
		require.NoError(t, err)
		if c.ServerName == "" {
			c.ServerName = "localhost"
		}
		return c
	}
	good := tlsconfig.Source{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}
	require.NoError(t, handshake(t, p.serverMutual, load(good)))

	stranger := tlstest.NewCA(t, "Stranger CA").Client(t, "mailsvc")
	sCert, sKey := stranger.WriteFiles(t, p.dir, "stranger")
	for name, c := range map[string]struct {
		client *tls.Config
		server *tls.Config
		hint   string
	}{
		"wrong CA":       {load(tlsconfig.Source{CAFile: p.otherFile, CertFile: p.certFile, KeyFile: p.keyFile}), p.serverMutual, "not signed by a CA of smtp.tls_ca_file"},
		"name mismatch":  {load(tlsconfig.Source{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "mail.internal"}), p.serverMutual, `not valid for "mail.internal": set smtp.tls_server_name`},
		"no client cert": {load(tlsconfig.Source{CAFile: p.caFile}), p.serverMutual, "requires a client certificate signed by a CA it trusts: set smtp.tls_cert_file and smtp.tls_key_file"},
		"client cert of a CA the server does not name": {load(tlsconfig.Source{CAFile: p.caFile, CertFile: sCert, KeyFile: sKey}), p.serverMutual, "requires a client certificate signed by a CA it trusts"},
		"client cert refused": {func() *tls.Config {
			c := load(tlsconfig.Source{CAFile: p.caFile, CertFile: sCert, KeyFile: sKey})
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.Certificates[0], nil }
			return c
		}(), p.serverMutual, "refused the client certificate of smtp.tls_cert_file"},
		"no client cert, TLS 1.2": {func() *tls.Config {
			c := load(tlsconfig.Source{CAFile: p.caFile})
			c.MaxVersion = tls.VersionTLS12
			return c
		}(), p.serverMutual, "ended the handshake: it may require a client certificate (smtp.tls_cert_file, smtp.tls_key_file)"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tlsconfig.Explain(handshake(t, c.server, c.client), keys)
			var ee *tlsconfig.Explained
			require.True(t, errors.As(err, &ee), "not explained: %v", err)
			require.Contains(t, err.Error(), c.hint)
			require.Same(t, err, tlsconfig.Explain(err, keys), "explained once")
		})
	}

	// A plaintext server on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("220 plain smtp here\r\n"))
			_ = c.Close()
		}
	}()
	_, err = tls.Dial("tcp", ln.Addr().String(), load(good))
	require.ErrorContains(t, tlsconfig.Explain(err, keys), "does not speak TLS on this port")

	plain := errors.New("connection refused")
	require.Same(t, plain, tlsconfig.Explain(plain, keys))
	require.NoError(t, tlsconfig.Explain(nil, keys))
}
