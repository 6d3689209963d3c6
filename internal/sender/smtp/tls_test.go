package smtp_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// privateRelay is an SMTP server whose certificate, for relay.internal
// only, comes from a private CA, and which requires a client certificate
// of that CA; dir holds the CA, a client certificate of it, and the CA
// of a stranger as PEM files.
type privateRelay struct {
	srv                              *smtptest.Server
	caFile, strangerCA, cert, keyPEM string
}

func newPrivateRelay(t *testing.T, mode string) *privateRelay {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp Root CA")
	o := smtptest.Options{TLSConfig: tlstest.ServerConfig(ca.Server(t, "relay.internal"), ca), Username: "mailer", Password: "pw"}
	if mode == smtp.TLSImplicit {
		o.ImplicitTLS = true
	} else {
		o.STARTTLS = true
	}
	cert, key := ca.Client(t, "mailsvc").WriteFiles(t, dir, "client")
	return &privateRelay{srv: smtptest.New(t, o), caFile: ca.WriteFile(t, dir, "ca.pem"),
		strangerCA: tlstest.NewCA(t, "Stranger CA").WriteFile(t, dir, "stranger.pem"), cert: cert, keyPEM: key}
}

// provider reads src the way serve does (tlsconfig.Client) and returns a
// provider for the relay on it.
func (r *privateRelay) provider(t *testing.T, mode string, src tlsconfig.Source) *smtp.Provider {
	t.Helper()
	src.Keys = tlsconfig.KeysOf("smtp")
	tc, _, err := tlsconfig.Client(src, time.Now())
	require.NoError(t, err)
	p, err := smtp.New(smtp.Config{Host: r.srv.Host, Port: r.srv.Port, TLS: mode, TLSConfig: tc, HELO: "test.local",
		Username: "mailer", Password: mailtype.Secret("pw")})
	require.NoError(t, err)
	return p
}

// A relay behind a private CA that requires a client certificate takes
// the mail when smtp.tls_ca_file, tls_cert_file, tls_key_file and
// tls_server_name are right, over STARTTLS and implicit TLS alike; a
// wrong CA, a missing client certificate or a name mismatch is refused
// during the handshake, before any mail command, as a tls failure whose
// message names the key to fix.
func TestPrivateCAAndClientCertificate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{smtp.TLSStartTLS, smtp.TLSImplicit} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newPrivateRelay(t, mode)
			good := tlsconfig.Source{CAFile: r.caFile, CertFile: r.cert, KeyFile: r.keyPEM, ServerName: "relay.internal"}
			s := r.provider(t, mode, good).NewSession()
			defer s.Close()
			require.NoError(t, send(t, s, "tls-ok", 10*time.Second))
			msgs := r.srv.Messages()
			require.Len(t, msgs, 1)
			require.True(t, msgs[0].TLS)
			require.Equal(t, "mailsvc", msgs[0].ClientCert)

			for name, c := range map[string]struct {
				src  tlsconfig.Source
				hint string
			}{
				"wrong CA":            {tlsconfig.Source{CAFile: r.strangerCA, CertFile: r.cert, KeyFile: r.keyPEM, ServerName: "relay.internal"}, "not signed by a CA of smtp.tls_ca_file"},
				"missing client cert": {tlsconfig.Source{CAFile: r.caFile, ServerName: "relay.internal"}, "requires a client certificate signed by a CA it trusts: set smtp.tls_cert_file and smtp.tls_key_file"},
				"name mismatch":       {tlsconfig.Source{CAFile: r.caFile, CertFile: r.cert, KeyFile: r.keyPEM}, `not valid for "127.0.0.1": set smtp.tls_server_name`},
			} {
				mails := r.srv.MailCommands()
				s := r.provider(t, mode, c.src).NewSession()
				err := send(t, s, "tls-"+name, 10*time.Second)
				_ = s.Close()
				require.Error(t, err, name)
				t.Logf("%s: %v", name, err)
				require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), name)
				require.Equal(t, mailtype.ReasonTLS, mailtype.ReasonOf(err), name)
				require.ErrorContains(t, err, c.hint, name)
				trouble, _ := sender.TroubleOf(err)
				require.Equal(t, sender.TroubleConfig, trouble, "%s: a configuration failure, counted by the breaker", name)
				require.Equal(t, mails, r.srv.MailCommands(), "%s: no mail command was sent", name)
			}
			require.Equal(t, 1, r.srv.Count(), "only the good session delivered")
		})
	}
}

// Whatever the given TLS configuration says, TLS 1.0 and 1.1 stay off.
func TestTLSConfigNeverGoesBelowTLS12(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "Corp Root CA")
	srvTLS := tlstest.ServerConfig(ca.Server(t, "127.0.0.1"), nil)
	srvTLS.MaxVersion = tls.VersionTLS11
	srvTLS.MinVersion = tls.VersionTLS10
	srv := smtptest.New(t, smtptest.Options{STARTTLS: true, TLSConfig: srvTLS})
	p, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, TLS: smtp.TLSStartTLS, HELO: "test.local",
		TLSConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10}})
	require.NoError(t, err)
	s := p.NewSession()
	defer s.Close()
	err = send(t, s, "old-tls", 10*time.Second)
	require.Error(t, err)
	require.Equal(t, mailtype.ReasonTLS, mailtype.ReasonOf(err))
	require.Zero(t, srv.MailCommands())
}
