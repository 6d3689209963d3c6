package smtp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	gosmtp "github.com/wneessen/go-mail/smtp"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// session is one worker's connection. Not safe for concurrent use.
type session struct {
	p      *Provider
	client *gosmtp.Client
	// raw is the TCP connection under client; closing it interrupts any
	// phase, TLS included, which is how the caller's deadline is enforced.
	raw net.Conn
	// idleSince is when the connection's last transaction ended.
	idleSince time.Time
}

// Send delivers m on the session's connection, dialing first when there
// is none. A reused connection that turns out dead before the transaction
// started is replaced once within the same call: nothing was sent on it.
// That is a failed NOOP check (a connection idle for warmFor or more), or
// MAIL FROM answered by no reply at all (a warm connection, not checked),
// by a 421 or by a 503 (deadBeforeTransaction). The transaction itself is
// transact's.
// After any failure the connection is dropped.
func (s *session) Send(ctx context.Context, m *sender.Message) (sender.Receipt, error) {
	built, err := buildMsg(m, s.p.cfg.IdempotencyHeader)
	if err != nil {
		return sender.Receipt{}, err
	}
	if s.p.cfg.ReturnPath != nil {
		if err := built.EnvelopeFrom(s.p.cfg.ReturnPath(m.ID)); err != nil {
			return sender.Receipt{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidAddress, "return path: %v", err)
		}
	}
	msg, err := withAttachments(built, m)
	if err != nil {
		return sender.Receipt{}, err
	}
	dsn := dsnParams{notify: s.p.cfg.DSNNotify, envID: m.DedupeKey}
	reused := s.client != nil
	r, err := s.sendOnce(ctx, msg, dsn)
	if err != nil && reused && deadBeforeTransaction(err) && ctx.Err() == nil {
		r, err = s.sendOnce(ctx, msg, dsn)
	}
	return r, err
}

// deadBeforeTransaction reports whether err says the connection, not the
// mail, failed before the transaction began: the NOOP check failed, or MAIL
// FROM got no SMTP reply (a closed or reset connection), a 421 (the server
// closes the channel: announced after the previous mail, or a limit of
// messages per connection, RFC 5321 section 4.2.2) or a 503 (bad sequence:
// a server that wants RSET between transactions). Any other reply code is
// the server's verdict on the mail. Under PIPELINING, RCPT TO and DATA went
// out with MAIL FROM, but a transaction whose MAIL FROM failed takes no
// message: nothing was sent either way.
func deadBeforeTransaction(err error) bool {
	var te *txError
	if !errors.As(err, &te) {
		return false
	}
	switch te.step {
	case stepCheck:
		return true
	case stepMail:
		return te.code == 0 || te.code == 421 || te.code == 503
	}
	return false
}

func (s *session) sendOnce(ctx context.Context, msg outgoing, dsn dsnParams) (sender.Receipt, error) {
	if s.client != nil && s.client.UpdateDeadline(s.p.cfg.PhaseTimeout) != nil {
		s.drop()
	}
	if s.client == nil {
		if err := s.dial(ctx); err != nil {
			return sender.Receipt{}, err
		}
	}
	raw := s.raw
	check := s.idleSince.IsZero() || time.Since(s.idleSince) >= warmFor
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	reply, err := transact(s.client, msg, check, dsn)
	cut := !stop()
	s.idleSince = time.Now()
	if err != nil || cut {
		s.drop()
	}
	if err == nil {
		return sender.Receipt{ProviderMessageID: mailtype.Sanitize(reply)}, nil
	}
	return sender.Receipt{}, classifySend(ctx, err)
}

// dial connects, reads the greeting, says EHLO, secures the connection as
// smtp.tls says and authenticates when a username is set, all under ctx.
// Every failure here happens before any mail data: transient.
func (s *session) dial(ctx context.Context) error {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", s.p.addr)
	if err != nil {
		e := dialError(ctx, mailtype.ReasonConnect, "connect", err)
		if unreachable(err) {
			return configError(e)
		}
		return outage(e) // a timeout, an unreachable network: the relay is not there
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	client, err := s.handshake(ctx, raw)
	if err != nil {
		_ = raw.Close()
		return err
	}
	if err := client.UpdateDeadline(s.p.cfg.PhaseTimeout); err != nil {
		_ = raw.Close()
		return dialError(ctx, mailtype.ReasonConnect, "set deadline", err)
	}
	s.client, s.raw, s.idleSince = client, raw, time.Now()
	return nil
}

func (s *session) handshake(ctx context.Context, raw net.Conn) (*gosmtp.Client, error) {
	conn := raw
	if s.p.cfg.TLS == TLSImplicit {
		tc := tls.Client(raw, s.p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, tlsError(ctx, "tls handshake", err)
		}
		conn = tc
	}
	client, err := gosmtp.NewClient(conn, s.p.cfg.Host)
	if err != nil {
		return nil, greetingError(dialError(ctx, mailtype.ReasonConnect, "greeting", err))
	}
	if err := client.Hello(s.p.cfg.HELO); err != nil {
		return nil, tlsTrouble(dialError(ctx, mailtype.ReasonConnect, "ehlo", err))
	}
	if err := s.startTLS(ctx, client); err != nil {
		return nil, err
	}
	if err := s.auth(ctx, client); err != nil {
		return nil, err
	}
	return client, nil
}

// startTLS applies the starttls and opportunistic modes. Under starttls a
// server without STARTTLS is refused, never used in plaintext.
func (s *session) startTLS(ctx context.Context, client *gosmtp.Client) error {
	mode := s.p.cfg.TLS
	if mode != TLSStartTLS && mode != TLSOpportunistic {
		return nil
	}
	ok, _ := client.Extension("STARTTLS")
	if !ok && mode == TLSStartTLS {
		e := mailtype.NewError(mailtype.Transient, mailtype.ReasonTLS, errNoStartTLS)
		e.Reroutable = true
		return configError(e)
	}
	if !ok {
		return nil
	}
	if err := client.StartTLS(s.p.tls); err != nil {
		return tlsError(ctx, "starttls", err)
	}
	return nil
}

// tlsError classifies a failed TLS handshake; a certificate that does not
// verify is a configuration failure.
func tlsError(ctx context.Context, phase string, err error) error {
	e := dialError(ctx, mailtype.ReasonTLS, phase, err)
	if badCertificate(err) {
		return configError(e)
	}
	return tlsTrouble(e)
}

// greetingError is e, a failed greeting: a 4xx reply refused the session
// for now (sender.TroubleBusy: a relay's cap of connections per client
// answers so), a TLS failure is the configuration's trouble.
func greetingError(e *mailtype.Error) error {
	if c := e.Detail.SMTPCode; c >= 400 && c < 500 {
		return &sender.ProviderError{Trouble: sender.TroubleBusy, Err: e}
	}
	if e.Reason == mailtype.ReasonTLS {
		return configError(e)
	}
	return outage(e) // no greeting, or a 5xx one: no mail gets through
}

// tlsTrouble makes a failure that tlsconfig.Explain recognised as TLS
// trouble (reason tls: the server refused the client certificate, which
// under TLS 1.3 surfaces with the greeting or the EHLO; no common version)
// a configuration failure the breaker counts: every mail would meet it.
func tlsTrouble(e *mailtype.Error) error {
	if e.Reason == mailtype.ReasonTLS {
		return configError(e)
	}
	return e
}

// auth authenticates with the strongest mechanism both sides support.
func (s *session) auth(ctx context.Context, client *gosmtp.Client) error {
	cfg := s.p.cfg
	if cfg.Username == "" {
		return nil
	}
	ok, offered := client.Extension("AUTH")
	if !ok {
		return configError(authError(mailtype.Errorf(mailtype.Transient, mailtype.ReasonAuth, "server offers no SMTP AUTH and smtp.username is set")))
	}
	mechs := strings.Fields(strings.ToUpper(offered))
	pass := cfg.Password.Reveal()
	var a gosmtp.Auth
	switch {
	case slices.Contains(mechs, "SCRAM-SHA-256"):
		a = gosmtp.ScramSHA256Auth(cfg.Username, pass)
	case slices.Contains(mechs, "SCRAM-SHA-1"):
		a = gosmtp.ScramSHA1Auth(cfg.Username, pass)
	case slices.Contains(mechs, "PLAIN"):
		a = gosmtp.PlainAuth("", cfg.Username, pass, cfg.Host, false)
	case slices.Contains(mechs, "LOGIN"):
		a = gosmtp.LoginAuth(cfg.Username, pass, cfg.Host, false)
	case slices.Contains(mechs, "CRAM-MD5"):
		a = gosmtp.CRAMMD5Auth(cfg.Username, pass)
	default:
		return configError(authError(mailtype.Errorf(mailtype.Transient, mailtype.ReasonAuth, "no supported SMTP AUTH mechanism in %q", offered)))
	}
	if err := client.Auth(a); err != nil {
		e := dialError(ctx, mailtype.ReasonAuth, "auth", fmt.Errorf("%s", mailtype.Sanitize(err.Error(), pass)))
		e.Detail = replyDetail(err) // the sanitized copy lost the reply
		if e.Detail.SMTPCode >= 500 {
			return configError(e) // 535 credentials refused, 534/538 mechanism refused
		}
		return e
	}
	return nil
}

// authError marks an authentication failure found before any command as
// one that proves nothing was sent.
func authError(e *mailtype.Error) *mailtype.Error {
	e.Reroutable = true
	return e
}

// drop closes the session's connection; the next Send dials again.
func (s *session) drop() {
	if s.raw != nil {
		_ = s.raw.Close()
	}
	s.client, s.raw, s.idleSince = nil, nil, time.Time{}
}

// Close says QUIT on an idle connection (best effort) and closes it.
func (s *session) Close() error {
	if s.client != nil {
		_ = s.client.UpdateDeadline(s.p.cfg.PhaseTimeout / 10)
		_ = s.client.Quit()
	}
	s.drop()
	return nil
}
