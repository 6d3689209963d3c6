// Package smtp is the SMTP provider of the sender pool, on
// github.com/wneessen/go-mail (the only package that imports it). Each
// worker keeps one connection and reuses it; any failed transaction
// replaces it, so a failed MAIL, RCPT or DATA cannot poison the next mail.
// The caller's context deadline covers the whole call: dial, TLS, every SMTP
// phase. Outcomes are classified from go-mail's typed errors and SMTP reply
// codes (docs/design.md, "Error classes").
package smtp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// TLS modes (smtp.tls).
const (
	// TLSStartTLS requires STARTTLS; a server that does not offer it is a
	// transient failure, never a plaintext send.
	TLSStartTLS = "starttls"
	// TLSImplicit speaks TLS from the first byte (port 465).
	TLSImplicit = "implicit"
	// TLSOpportunistic uses STARTTLS when offered, plaintext otherwise.
	TLSOpportunistic = "opportunistic"
	// TLSNone never uses TLS.
	TLSNone = "none"
)

// Config configures the SMTP provider.
type Config struct {
	// Host and Port address the SMTP server.
	Host string
	Port int
	// Username enables SMTP AUTH when set (SCRAM-SHA-256, SCRAM-SHA-1,
	// PLAIN, LOGIN or CRAM-MD5, in that preference, as the server offers;
	// PLAIN and LOGIN only over TLS or to localhost).
	Username string
	Password mailtype.Secret
	// TLS is one of the TLS* modes; "" means starttls.
	TLS string
	// TLSConfig, when set, replaces the default client TLS configuration
	// (the system roots, server name = Host): the smtp.tls_* files, read
	// by tlsconfig.Client. An empty ServerName means Host; a MinVersion
	// below TLS 1.2 is raised to it.
	TLSConfig *tls.Config
	// IdempotencyHeader, when set, names a mail header that carries the
	// idempotency key, for relays that honour one (Resend-Idempotency-Key,
	// X-EE-Idempotency-Key).
	IdempotencyHeader string
	// HELO is the name sent in EHLO; "" means the host name.
	HELO string
	// ReturnPath, when set, gives the envelope sender (MAIL FROM) of mail
	// id: its VERP address (internal/bounce), so that a bounce names the
	// mail. Nil sends from the From address.
	ReturnPath func(id int64) string
	// DSNNotify is the NOTIFY parameter of RCPT TO (RFC 3461) where the
	// server offers DSN, e.g. "FAILURE,DELAY"; MAIL FROM then carries
	// RET=HDRS and ENVID (the mail's dedupe key, xtext-encoded). "" asks
	// for nothing.
	DSNNotify string
	// PhaseTimeout bounds each SMTP command on top of the caller's deadline
	// (default 30s).
	PhaseTimeout time.Duration
}

// Provider sends mails over SMTP. Safe for concurrent use.
type Provider struct {
	cfg  Config
	tls  *tls.Config
	addr string
}

// warmFor is how long after a finished transaction a connection is taken
// to be alive without a NOOP: the two round trips NOOP and RSET were a
// third of a mail's SMTP exchange on loopback. No RSET follows a delivered
// mail either: a new MAIL may follow the end of mail data at once (RFC
// 5321, section 3.3). A connection that died
// meanwhile fails at MAIL FROM, before any mail data, and the send is
// retried once on a new connection (session.Send).
const warmFor = time.Second

// New checks cfg and returns a Provider; it does not connect.
func New(cfg Config) (*Provider, error) {
	if cfg.TLS == "" {
		cfg.TLS = TLSStartTLS
	}
	switch cfg.TLS {
	case TLSStartTLS, TLSImplicit, TLSOpportunistic, TLSNone:
	default:
		return nil, fmt.Errorf("smtp.tls: must be starttls, implicit, opportunistic or none, got %q", cfg.TLS)
	}
	if cfg.Host == "" || cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("smtp: host and port 1..65535 are required, got %q:%d", cfg.Host, cfg.Port)
	}
	if cfg.PhaseTimeout <= 0 {
		cfg.PhaseTimeout = 30 * time.Second
	}
	if cfg.HELO == "" {
		cfg.HELO, _ = os.Hostname()
	}
	tc := &tls.Config{ServerName: cfg.Host, MinVersion: tlsconfig.MinVersion}
	if cfg.TLSConfig != nil {
		tc = cfg.TLSConfig.Clone()
		if tc.ServerName == "" {
			tc.ServerName = cfg.Host
		}
		tc.MinVersion = max(tc.MinVersion, tlsconfig.MinVersion)
	}
	return &Provider{cfg: cfg, tls: tc, addr: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))}, nil
}

// Name returns "smtp".
func (p *Provider) Name() string { return "smtp" }

// RelayIdempotencyWindow is how long a relay that honours
// Config.IdempotencyHeader is trusted to drop a resend carrying a key it
// has seen: Resend's SMTP relay keeps Resend-Idempotency-Key for 24 h
// (Resend documentation, "Idempotency Keys"); configure the header only for
// a relay that keeps its keys at least as long.
const RelayIdempotencyWindow = 24 * time.Hour

// IdempotencyWindow returns 0 for plain SMTP, which cannot be made
// idempotent, and RelayIdempotencyWindow when Config.IdempotencyHeader is
// set: the relay dedupes, so resends after an ambiguous outcome are safe.
func (p *Provider) IdempotencyWindow() time.Duration {
	if p.cfg.IdempotencyHeader != "" {
		return RelayIdempotencyWindow
	}
	return 0
}

// NewSession returns a session that dials on its first Send.
func (p *Provider) NewSession() sender.Session { return &session{p: p} }

var errNoStartTLS = errors.New("server does not offer STARTTLS and smtp.tls is starttls (required)")
