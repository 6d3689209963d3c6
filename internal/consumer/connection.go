package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/store"
)

// onConnection is the work on one live connection (a broker.ConnectionFunc): declare
// the topology, then, again and again, wait until the database accepts
// writes and consume on a new channel, until the connection or a channel
// fails (an error: Supervise reconnects) or a graceful stop has drained
// the deliveries (nil). A channel whose deliveries were released because
// the database refuses writes (errWritesRefused) is followed by the next
// round on the same connection. healthy is called each time consuming
// starts: a reconnect after that starts from the shortest backoff.
func (c *Consumer) onConnection(ctx context.Context, conn *broker.Conn, healthy func()) error {
	c.setConn(conn)
	defer c.setConn(nil)
	if c.cfg.DeclareTopology {
		if err := DeclareTopology(conn, c.cfg); err != nil {
			return err
		}
	}
	for {
		if err := c.waitForDatabase(ctx); err != nil {
			return err
		}
		err := c.consume(ctx, conn, healthy)
		if !errors.Is(err, errWritesRefused) {
			return err
		}
	}
}

// consume opens a confirm-mode channel for dead-lettering and a consuming
// channel, and consumes until the loop ends. Closing the consuming channel
// on return hands its unacknowledged deliveries back to the broker.
func (c *Consumer) consume(ctx context.Context, conn *broker.Conn, healthy func()) error {
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		return err
	}
	defer pub.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(c.cfg.Prefetch); err != nil {
		return err
	}
	gone := watchChannels(ch, pub.Closed())
	if !c.beginConsuming(ch) {
		return nil
	}
	defer c.endConsuming()
	tag := consumerTag()
	deliveries, err := ch.Consume(c.cfg.Queue, tag, c.cfg.Prefetch)
	if err != nil {
		return err
	}
	healthy()
	c.log.Info("consuming", "queue", c.cfg.Queue, "consumer_tag", tag, "prefetch", c.cfg.Prefetch, "batch_size", c.cfg.BatchSize)
	l := &loop{c: c, ch: ch, pub: pub, tag: tag, in: deliveries, gone: gone}
	err = l.run(ctx)
	switch {
	case errors.Is(err, errWritesRefused):
		c.metrics.Releases.Inc()
		c.log.Warn("the database refuses writes; deliveries given back, not consuming until it accepts them",
			"error", c.refusal.status())
	case err != nil && conn.IsClosed():
		return fmt.Errorf("connection closed: %w", err)
	}
	return err
}

// waitForDatabase returns once the database accepts writes, so that a
// connection does not take deliveries it cannot record (each one taken and
// returned would count against the delivery limit). It probes with capped
// exponential backoff; a probe the database refuses (read-only, privilege)
// keeps /readyz not ready (WritesAccepted).
func (c *Consumer) waitForDatabase(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
		err := c.store.CheckWritable(pctx)
		cancel()
		if err == nil {
			c.refusal.probed()
			if attempt > 1 {
				c.log.Info("the database accepts writes again; consuming")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if store.IsWriteRefused(err) {
			c.refusal.refused(err)
		}
		if attempt == 1 {
			c.log.Warn("the database does not accept writes; not consuming until it does", "error", err)
		}
		if !backoff.Sleep(ctx.Done(), backoff.Delay(attempt, c.cfg.RetryBackoff, c.cfg.RetryBackoffMax)) {
			return ctx.Err()
		}
	}
}

// channelWatch is closed (done) when the consuming channel or the
// dead-letter channel closes, or the broker cancels the consumer (queue
// deleted); err says which.
type channelWatch struct {
	done chan struct{}
	err  error
}

func watchChannels(ch *broker.Channel, pubClosed <-chan error) *channelWatch {
	w := &channelWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		select {
		case e := <-ch.Closed():
			w.err = closedError("consume channel", e)
		case e := <-pubClosed:
			w.err = closedError("dead-letter channel", e)
		case tag := <-ch.Cancelled():
			w.err = fmt.Errorf("broker cancelled consumer %q (queue deleted or moved)", tag)
		}
	}()
	return w
}

// closedError describes a channel closure; e is nil for a client close.
// A consumer acknowledgement timeout arrives here as PRECONDITION_FAILED.
func closedError(what string, e error) error {
	if e == nil {
		return fmt.Errorf("%s closed", what)
	}
	return fmt.Errorf("%s closed by the broker: %w", what, e)
}

// consumerTag is unique per connection and names the host for operators.
func consumerTag() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("mailsvc-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// loop consumes one channel (see pipeline.go).
type loop struct {
	c    *Consumer
	ch   *broker.Channel
	pub  *broker.Publisher
	tag  string
	in   <-chan broker.Delivery
	gone *channelWatch
	// recorders counts the goroutines recording a flight.
	recorders sync.WaitGroup
	// end cancels the loop (set by run); released is set by the recorder
	// that ends it to give the deliveries back (refusal.go).
	end      context.CancelFunc
	released atomic.Bool
	// pubMu serializes the dead-letter publishes of settle and the
	// holders (a Publisher is not safe for concurrent use).
	pubMu sync.Mutex
	// held counts the deliveries held because the dead-letter queue
	// refused them (hold.go); holders are their goroutines, which run
	// under holdCtx until stopHolds (set by run).
	held      atomic.Int64
	holders   sync.WaitGroup
	holdCtx   context.Context
	stopHolds context.CancelFunc
}

// collect returns first and whatever else has already arrived, up to the
// batch size, without waiting.
func (l *loop) collect(first broker.Delivery) []broker.Delivery {
	batch := []broker.Delivery{first}
	for len(batch) < l.c.cfg.BatchSize {
		select {
		case r, ok := <-l.in:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// goneError prefers the channel watcher's reason when it has one.
func (l *loop) goneError(fallback error) error {
	select {
	case <-l.gone.done:
		return l.gone.err
	default:
		return fallback
	}
}

// pause waits d, or returns early with an error when the channel dies or
// ctx ends (the held deliveries are then abandoned with their channel).
func (l *loop) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-l.gone.done:
		return l.gone.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
