// Package broker holds the AMQP code shared by the consumer, the relay and
// the operator commands: a connection supervisor that reconnects with
// capped exponential backoff, and a publisher with publisher confirms.
// amqp091-go does not reconnect by itself; this package does.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/backoff"
)

// Config says where and how to connect.
type Config struct {
	// URL is an amqp:// or amqps:// URL.
	URL string
	// TLS is the client TLS configuration of an amqps:// URL (the
	// amqp.tls_* files, read by tlsconfig.Client); nil means the system
	// roots. An empty ServerName means the URL's host; a MinVersion below
	// TLS 1.2 is raised to it. Set with an amqp:// URL, Dial refuses it:
	// the connection would be plaintext.
	TLS *tls.Config
	// Name is the connection_name shown in the RabbitMQ management UI.
	Name string
	// Backoff and BackoffMax bound the delay between reconnect attempts;
	// zero values mean DefaultBackoff and DefaultBackoffMax.
	Backoff, BackoffMax time.Duration
	// ConnectTimeout bounds the TCP connect alone; zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// DialTimeout bounds the TCP connect, the TLS and the AMQP handshake
	// together; zero means 10s.
	DialTimeout time.Duration
	// OnBlocked, when set, is called by Supervise with true when the broker
	// blocks the connection (connection.blocked: a memory or disk alarm,
	// during which no publish of this connection proceeds) and with false
	// when it unblocks it or the connection is gone. It must not block.
	OnBlocked func(blocked bool)
}

// Reconnect defaults. The promise is that a part holding a connection
// consumes or publishes again within 5 s of the broker's return, however
// long it was away (issue 30): the attempt that meets the return comes at
// most BackoffMax after it, so DefaultBackoffMax is 2 s, leaving 3 s for
// the dial, the topology and the first delivery. A connect that hangs (a
// vanished host whose SYNs are dropped) is given up after
// DefaultConnectTimeout: Linux resends a SYN 1 s after the first, then 3 s
// after it, so a host back after the resend is met by the next attempt,
// at most DefaultConnectTimeout + BackoffMax (4 s) after the hanging one
// began, not by the resend at 3 s or 7 s.
const (
	DefaultBackoff        = 500 * time.Millisecond
	DefaultBackoffMax     = 2 * time.Second
	DefaultConnectTimeout = 2 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	return c
}

// ConnectionFunc is the work done on one live connection. It calls healthy once
// the connection does its job (channels open, topology declared,
// consuming): from then on, the next reconnect waits only the shortest
// backoff again. It must return when ctx is done (ctx is cancelled when the
// connection closes) or when its own channel closes; it returns nil only
// for a clean stop.
type ConnectionFunc func(ctx context.Context, conn *Conn, healthy func()) error

// PublisherFunc is the work done with a confirming Publisher on one live
// connection; the same contract as ConnectionFunc.
type PublisherFunc func(ctx context.Context, pub *Publisher) error

// SupervisePublisher is Supervise for code that only publishes: on every
// connection it opens a Publisher (confirm mode), runs work with it, and
// closes it afterwards, so the caller never touches amqp091-go types. The
// connection counts as healthy once the publisher's channel is open.
func SupervisePublisher(ctx context.Context, c Config, log *slog.Logger, onState func(bool), work PublisherFunc) error {
	return Supervise(ctx, c, log, onState, func(ctx context.Context, conn *Conn, healthy func()) error {
		pub, err := NewPublisher(conn)
		if err != nil {
			return err
		}
		defer pub.Close()
		healthy()
		return work(ctx, pub)
	})
}

// Supervise keeps a connection open and runs work on it, again and again,
// until ctx is done: dial, run, and after a failure (dial error, connection
// or channel closed, an error of work) wait a jittered, capped exponential
// backoff and start over. The backoff grows with consecutive failures and
// starts again from Backoff after a connection that became healthy, however
// short, so that the broker's return after repeated outages is met within
// the shortest delays, not the longest. onState, when non-nil, is called
// with true once connected and false once the connection is gone (for the
// mailsvc_amqp_connected gauge). Supervise returns nil when ctx is done,
// and an error of work that wraps ErrTopologyMismatch at once: a queue or
// exchange that exists with other settings stays so however often one
// reconnects, and needs an operator.
func Supervise(ctx context.Context, c Config, log *slog.Logger, onState func(bool), work ConnectionFunc) error {
	c = c.withDefaults()
	if onState == nil {
		onState = func(bool) {}
	}
	failures := 0
	for ctx.Err() == nil {
		healthy, err := runOnce(ctx, c, onState, work)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrTopologyMismatch) {
			return err
		}
		if healthy {
			failures = 0
		}
		failures++
		if err == nil {
			err = errors.New("the connection's work ended")
		}
		d := backoff.Delay(failures, c.Backoff, c.BackoffMax)
		log.Warn("broker connection lost, reconnecting", "error", err, "retry_in", d.String(), "failures", failures)
		if !backoff.Sleep(ctx.Done(), d) {
			return nil
		}
	}
	return nil
}

// runOnce dials and runs work on one connection. healthy reports that the work
// said the connection was healthy, so the next reconnect starts again from
// the shortest delay.
func runOnce(ctx context.Context, c Config, onState func(bool), work ConnectionFunc) (healthy bool, err error) {
	conn, err := Dial(c)
	if err != nil {
		return false, err
	}
	onState(true)
	defer onState(false)
	defer conn.Close()
	if c.OnBlocked != nil {
		go watchBlocked(conn.c.NotifyBlocked(make(chan amqp.Blocking, 1)), c.OnBlocked)
	}
	closed := conn.c.NotifyClose(make(chan *amqp.Error, 1))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-closed:
			cancel()
		case <-sctx.Done():
		}
	}()
	var once atomic.Bool
	err = work(sctx, conn, func() { once.Store(true) })
	if err == nil && !conn.IsClosed() && ctx.Err() == nil {
		err = errors.New("the connection's work returned while the connection is open")
	}
	return once.Load(), err
}

// watchBlocked reports every connection.blocked and connection.unblocked
// of in to onBlocked, and false once in closes with its connection.
func watchBlocked(in <-chan amqp.Blocking, onBlocked func(bool)) {
	for b := range in {
		onBlocked(b.Active)
	}
	onBlocked(false)
}
