package broker

import (
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Conn is one AMQP connection. Its methods are safe for concurrent use.
// Closing it closes every Channel, Publisher and Getter opened on it.
type Conn struct {
	c *amqp.Connection
}

// Dial opens one connection, with a heartbeat of 10 s, the configured
// connect timeout, and the dial timeout, which also bounds the TLS and
// AMQP handshakes. An amqps:// URL
// speaks TLS 1.2 or newer with Config.TLS (tls.go). The error names the
// URL without its password; a certificate failure carries a hint naming
// the amqp.tls_* key to fix (tlsconfig.Explain).
func Dial(c Config) (*Conn, error) {
	c = c.withDefaults()
	uri, err := amqp.ParseURI(c.URL)
	if err != nil {
		// The parser's error may quote the URL, password included.
		return nil, errors.New("dial broker: the URL is not a valid amqp:// or amqps:// URL")
	}
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Dial:       dialer(c),
		Properties: amqp.Table{"connection_name": c.Name},
	}
	target := c.URL
	var t *tlsDialer
	switch {
	case uri.Scheme == "amqps":
		if target, t, err = newTLSDialer(c, uri.Host); err != nil {
			return nil, fmt.Errorf("dial broker %s: %w", redactURL(c.URL), err)
		}
		cfg.Dial = t.dial
	case c.TLS != nil:
		return nil, fmt.Errorf("dial broker %s: a TLS configuration is set but the URL is amqp:// (plaintext): use amqps://", redactURL(c.URL))
	}
	conn, err := amqp.DialConfig(target, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial broker %s: %w", redactURL(c.URL), t.explain(err))
	}
	return &Conn{c: conn}, nil
}

// dialer connects within c.ConnectTimeout and sets a deadline of
// c.DialTimeout from the start for the handshakes that follow (TLS, AMQP;
// amqp091-go clears it once the connection is open), as amqp.DefaultDial
// does with one timeout for both.
func dialer(c Config) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		began := time.Now()
		conn, err := net.DialTimeout(network, addr, min(c.ConnectTimeout, c.DialTimeout))
		if err != nil {
			return nil, err
		}
		if err := conn.SetDeadline(began.Add(c.DialTimeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// Close closes the connection; it unblocks every call in flight on it.
func (c *Conn) Close() error { return c.c.Close() }

// IsClosed reports whether the connection is closed.
func (c *Conn) IsClosed() bool { return c.c.IsClosed() }

func redactURL(raw string) string {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return "<unparsable amqp url>"
	}
	u.Password = "xxxxx"
	return u.String()
}

// closedErrors turns a NotifyClose channel of amqp091-go into one of
// error: it receives the broker's reason when the broker closed the
// channel or connection, and is closed (without a value) afterwards or
// when the client closed it.
func closedErrors(in <-chan *amqp.Error) <-chan error {
	out := make(chan error, 1)
	go func() {
		defer close(out)
		for e := range in {
			if e != nil {
				out <- e
			}
		}
	}()
	return out
}

// Vhost returns the virtual host of an amqp:// URL ("/" when it names
// none, or cannot be parsed).
func Vhost(raw string) string {
	u, err := amqp.ParseURI(raw)
	if err != nil || u.Vhost == "" {
		return "/"
	}
	return u.Vhost
}
