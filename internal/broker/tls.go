package broker

import (
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"sync"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// tlsKeys are the config keys a certificate failure points to.
var tlsKeys = tlsconfig.KeysOf("amqp")

// tlsDialer secures an amqps:// connection itself, instead of leaving it
// to amqp091-go, for two reasons: under TLS 1.3 a broker's refusal of the
// client certificate arrives after the handshake, with the first read,
// where amqp091-go may report only "channel/connection is not open" — the
// dialer keeps that read's error; and the configuration it is given is
// used as is (a copy per connection), never written to.
type tlsDialer struct {
	cfg     *tls.Config
	timeout func(network, addr string) (net.Conn, error)

	mu      sync.Mutex
	readErr error
}

// newTLSDialer returns the URL to hand amqp091-go (the same, as amqp://
// with the port explicit, so that it does not wrap the connection in TLS
// a second time) and the dialer. The client configuration is c.TLS, or the
// system roots when nil; TLS 1.2 or newer; server name the URL's host
// unless c.TLS names one.
func newTLSDialer(c Config, host string) (string, *tlsDialer, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", nil, errors.New("the URL does not parse")
	}
	u.Scheme = "amqp"
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "5671")
	}
	cfg := &tls.Config{}
	if c.TLS != nil {
		cfg = c.TLS.Clone()
	}
	cfg.MinVersion = max(cfg.MinVersion, tlsconfig.MinVersion)
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	return u.String(), &tlsDialer{cfg: cfg, timeout: dialer(c)}, nil
}

// dial connects (dialer: the deadline covers the handshake too)
// and completes the TLS handshake.
func (d *tlsDialer) dial(network, addr string) (net.Conn, error) {
	raw, err := d.timeout(network, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, d.cfg)
	if err := tc.Handshake(); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return &readErrConn{Conn: tc, d: d}, nil
}

// explain returns err, or the connection's first read error when that is
// a TLS failure, with the hint of tlsconfig.Explain. Safe on a nil d (an
// amqp:// connection).
func (d *tlsDialer) explain(err error) error {
	if d == nil {
		return err
	}
	d.mu.Lock()
	readErr := d.readErr
	d.mu.Unlock()
	var explained *tlsconfig.Explained
	if readErr != nil && errors.As(tlsconfig.Explain(readErr, tlsKeys), &explained) {
		return explained
	}
	return tlsconfig.Explain(err, tlsKeys)
}

// readErrConn keeps the first read error of the connection in its dialer.
type readErrConn struct {
	net.Conn
	d *tlsDialer
}

func (c *readErrConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.d.mu.Lock()
		if c.d.readErr == nil {
			c.d.readErr = err
		}
		c.d.mu.Unlock()
	}
	return n, err
}

// ConnectionState reports the TLS state, for amqp091-go's
// Connection.ConnectionState.
func (c *readErrConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}
