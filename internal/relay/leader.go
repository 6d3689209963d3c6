package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/store"
)

// errStepDown ends a leadership whose broker stayed unreachable for
// BrokerStepDown, so that a replica that can reach the broker takes over.
var errStepDown = errors.New("broker unreachable: releasing the relay lock")

// run keeps a database session until soft is done: open it, contend for
// the lock, lead while holding it, and after a failure reconnect with
// capped, jittered backoff. After stepping down it waits three LockRetry
// periods, so a standby gets the lock first.
func (r *Relay) run(soft, hard context.Context) {
	failures := 0
	for soft.Err() == nil {
		began := time.Now()
		err := r.session(soft, hard)
		if soft.Err() != nil {
			return
		}
		var d time.Duration
		if errors.Is(err, errStepDown) {
			d = 3 * r.cfg.LockRetry
			r.log.Warn("relay stepped down: the broker is unreachable from this replica", "after", r.cfg.BrokerStepDown.String(), "retry_in", d.String())
		} else {
			if time.Since(began) > r.cfg.ReconnectBackoffMax {
				failures = 0
			}
			failures++
			d = backoff.Delay(failures, r.cfg.ReconnectBackoff, r.cfg.ReconnectBackoffMax)
			r.log.Warn("relay database session lost, reconnecting", "error", err, "retry_in", d.String(), "failures", failures)
		}
		if !backoff.Sleep(soft.Done(), d) {
			return
		}
	}
}

// session opens the dedicated connection, waits for the lock and leads.
// It returns why the session ended (nil on a soft stop).
func (r *Relay) session(soft, hard context.Context) error {
	sess, err := r.st.OpenRelaySession(soft, r.cfg.Name)
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := r.awaitLock(soft, sess); err != nil || soft.Err() != nil {
		return err
	}
	r.m.Leader.Set(1)
	defer r.m.Leader.Set(0)
	r.log.Info("relay lock acquired: this replica publishes the outbox")
	err = r.lead(soft, hard, sess)
	r.log.Info("relay lock released")
	return err
}

// awaitLock tries the lock every LockRetry until this session holds it.
func (r *Relay) awaitLock(ctx context.Context, sess *store.RelaySession) error {
	standby := false
	for {
		held, err := sess.TryLock(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil || held {
			return err
		}
		if !standby {
			r.log.Info("relay standing by: another replica holds the relay lock")
			standby = true
		}
		if !backoff.Sleep(ctx.Done(), r.cfg.LockRetry) {
			return nil
		}
	}
}

// dbError marks an error of the relay's database session: leadership ends
// with it, whereas a broker error only reconnects the broker.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

// lead publishes while this session holds the lock: the LISTEN loop wakes
// it, broker.SupervisePublisher keeps a broker connection, a database
// error ends it (the lock may be gone with the connection), and so does a
// broker unreachable for BrokerStepDown.
func (r *Relay) lead(soft, hard context.Context, sess *store.RelaySession) error {
	lctx, cancel := context.WithCancelCause(soft)
	bw := &brokerWatch{since: time.Now()}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.listen(lctx)
	}()
	go func() {
		defer wg.Done()
		r.watchBroker(lctx, bw, cancel)
	}()
	r.Wake() // rows written while no relay was active
	onConn := func(up bool) {
		r.onConn(up)
		bw.set(up)
	}
	_ = broker.SupervisePublisher(lctx, r.cfg.AMQP, r.log, onConn, func(ctx context.Context, pub *broker.Publisher) error {
		err := r.publishLoop(ctx, hard, pub, sess)
		var de *dbError
		if errors.As(err, &de) {
			cancel(de.err)
		}
		return err
	})
	cancel(nil)
	wg.Wait()
	if soft.Err() != nil {
		return nil
	}
	return context.Cause(lctx)
}

// brokerWatch tracks since when the broker connection is down.
type brokerWatch struct {
	mu    sync.Mutex
	up    bool
	since time.Time
}

func (w *brokerWatch) set(up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.up != up {
		w.up, w.since = up, time.Now()
	}
}

// downFor is how long the connection has been down (0 while up).
func (w *brokerWatch) downFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.up {
		return 0
	}
	return time.Since(w.since)
}

// watchBroker ends the leadership (errStepDown) once the broker has been
// unreachable for BrokerStepDown, checking four times per period.
func (r *Relay) watchBroker(ctx context.Context, bw *brokerWatch, cancel context.CancelCauseFunc) {
	t := time.NewTicker(r.cfg.BrokerStepDown / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if d := bw.downFor(); d >= r.cfg.BrokerStepDown {
				cancel(fmt.Errorf("%w (down for %s)", errStepDown, d.Round(time.Millisecond)))
				return
			}
		}
	}
}
