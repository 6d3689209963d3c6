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
var errStepDown = errors.New("broker unreachable: releasing the relay lease")

// errLeaseUnconfirmed ends a leadership whose renewals kept failing until
// LeaseRenew before the lease could expire: from the expiry on another
// replica may lead, so this one stops first.
var errLeaseUnconfirmed = errors.New("relay lease not renewed in time: stepping down before it can expire")

// run contends for the lease until soft is done: stand by until this relay
// holds it, lead, and contend again. After a broker step-down it waits
// two LeaseRetry periods first (4 s by default), so that a standby that
// reaches the broker takes the lease; no longer, so that a broker back
// during the wait still finds this relay publishing within 5 s of its
// return when no standby took over.
func (r *Relay) run(soft, hard context.Context, db DB) {
	defer r.lastLeader.Store(false)
	for soft.Err() == nil {
		l, ok := r.awaitLease(soft, db)
		if !ok {
			return
		}
		err := r.lead(soft, hard, db, l)
		if soft.Err() != nil {
			return
		}
		wait := r.cfg.LeaseRetry
		if errors.Is(err, errStepDown) {
			wait = 2 * r.cfg.LeaseRetry
			r.log.Warn("relay stepped down: the broker is unreachable from this replica", "after", r.cfg.BrokerStepDown.String(), "retry_in", wait.String())
		} else {
			r.log.Warn("relay stepped down: it no longer holds the relay lease", "error", err, "retry_in", wait.String())
		}
		if !backoff.Sleep(soft.Done(), wait) {
			return
		}
	}
}

// lease is one leadership: its epoch (fencing token) and the local time
// just before the statement that took it, from which its validity counts.
type lease struct {
	epoch   int64
	renewed time.Time
}

// awaitLease tries to take the lease every LeaseRetry, each try bounded by
// LeaseRenew, until this relay holds it (ok) or ctx is done. It logs once
// when it starts standing by and once when the database starts failing.
func (r *Relay) awaitLease(ctx context.Context, db DB) (l lease, ok bool) {
	standby, failing := false, false
	for {
		began := time.Now()
		tctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseRenew)
		epoch, held, err := db.AcquireLease(tctx, r.holder, r.cfg.Lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return lease{}, false
		case held:
			return lease{epoch: epoch, renewed: began}, true
		case err != nil && !failing:
			r.log.Warn("relay cannot reach the database to take the lease, retrying", "error", err, "retry_every", r.cfg.LeaseRetry.String())
		case err == nil && !standby:
			r.lastLeader.Store(false) // another relay holds the lease
			r.logStandby(ctx, db)
			standby = true
		}
		failing = err != nil
		if !backoff.Sleep(ctx.Done(), r.cfg.LeaseRetry) {
			return lease{}, false
		}
	}
}

// logStandby says that another relay holds the lease, naming it if it can.
func (r *Relay) logStandby(ctx context.Context, db DB) {
	tctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseRenew)
	defer cancel()
	holder, remaining, err := db.LeaseHolder(tctx)
	if err != nil {
		holder = "unknown"
	}
	r.log.Info("relay standing by: another replica holds the relay lease",
		"holder", holder, "expires_in", remaining.Round(time.Millisecond).String(), "retry_every", r.cfg.LeaseRetry.String())
}

// lead publishes while this relay holds lease l: keepLease renews it, the
// LISTEN loop wakes the publisher, broker.SupervisePublisher keeps a broker
// connection. It ends when the lease is lost or cannot be confirmed, when
// the broker stayed unreachable for BrokerStepDown, or on a soft stop (nil),
// and then releases the lease unless another relay took it.
func (r *Relay) lead(soft, hard context.Context, db DB, l lease) error {
	lctx, end := context.WithCancelCause(soft)   // no round starts after it
	rctx, abort := context.WithCancelCause(hard) // ends the round in flight too
	defer abort(nil)
	kctx, stopKeeper := context.WithCancel(hard) // renews until the last round ended
	stepDown := func(err error) {
		r.setLeader(false) // at once: the round in flight may take a moment to end
		end(err)
	}
	r.setLeader(true)
	r.log.Info("relay lease acquired: this replica publishes the outbox", "epoch", l.epoch, "holder", r.holder)
	var wg sync.WaitGroup
	r.goLeading(&wg, lctx, kctx, db, l, stepDown, abort)
	r.Wake() // rows written while no relay was active
	bw := &brokerWatch{since: time.Now()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watchBroker(lctx, bw, stepDown)
	}()
	onConn := func(up bool) {
		r.onConn(up)
		bw.set(up)
	}
	_ = broker.SupervisePublisher(lctx, r.cfg.AMQP, r.log, onConn, func(ctx context.Context, pub *broker.Publisher) error {
		err := r.publishLoop(ctx, rctx, pub, db, l.epoch)
		if errors.Is(err, store.ErrRelayLeaseLost) {
			abort(err)
			stepDown(err)
		}
		return err
	})
	end(nil)
	stopKeeper()
	wg.Wait()
	r.setLeader(false)
	return r.endLeadership(soft, hard, db, l, context.Cause(lctx))
}

// goLeading starts the goroutines of a leadership: the lease keeper (on
// kctx) and, unless disabled, the LISTEN loop (on lctx).
func (r *Relay) goLeading(wg *sync.WaitGroup, lctx, kctx context.Context, db DB, l lease, stepDown, abort func(error)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.keepLease(kctx, db, l, stepDown, abort)
	}()
	if r.cfg.DisableListen {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.listen(lctx)
	}()
}

// endLeadership releases the lease (unless another relay took it, or a
// hard stop leaves no time) and returns why the leadership ended, nil for
// a soft stop.
func (r *Relay) endLeadership(soft, hard context.Context, db DB, l lease, cause error) error {
	if soft.Err() != nil {
		cause = nil
	}
	if errors.Is(cause, store.ErrRelayLeaseLost) {
		r.lastLeader.Store(false)
		r.log.Info("relay lease lost to another replica", "epoch", l.epoch)
		return cause
	}
	ctx, cancel := context.WithTimeout(hard, r.cfg.LeaseRenew)
	defer cancel()
	if err := db.ReleaseLease(ctx, l.epoch); err != nil && hard.Err() == nil {
		r.log.Warn("relay lease not released: it expires by itself", "error", err, "epoch", l.epoch)
	} else {
		r.log.Info("relay lease released", "epoch", l.epoch)
	}
	return cause
}

// keepLease renews the lease every LeaseRenew until ctx ends. A renewal
// that finds another epoch ends the leadership and the round in flight:
// another relay leads. A renewal that fails otherwise is retried (one
// broken pooled connection is no lost lease) until LeaseRenew before the
// lease could expire, counted from the start of the last successful
// renewal; then the relay steps down and aborts its round, before another
// replica can take over.
func (r *Relay) keepLease(ctx context.Context, db DB, l lease, stepDown, abort func(error)) {
	valid := l.renewed.Add(r.cfg.Lease)
	wait := r.cfg.LeaseRenew
	for {
		deadline := valid.Add(-r.cfg.LeaseRenew)
		if !backoff.Sleep(ctx.Done(), min(wait, time.Until(deadline))) {
			return
		}
		if !time.Now().Before(deadline) {
			err := fmt.Errorf("%w (last renewed %s ago)", errLeaseUnconfirmed, time.Since(valid.Add(-r.cfg.Lease)).Round(time.Millisecond))
			abort(err)
			stepDown(err)
			return
		}
		began := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := db.RenewLease(rctx, l.epoch, r.cfg.Lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			valid, wait = began.Add(r.cfg.Lease), r.cfg.LeaseRenew
		case errors.Is(err, store.ErrRelayLeaseLost):
			abort(err)
			stepDown(err)
			return
		default:
			r.log.Warn("relay lease renewal failed, retrying", "error", err, "steps_down_in", time.Until(deadline).Round(time.Millisecond).String())
			wait = r.cfg.LeaseRenew / 4
		}
	}
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
func (r *Relay) watchBroker(ctx context.Context, bw *brokerWatch, stepDown func(error)) {
	t := time.NewTicker(r.cfg.BrokerStepDown / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if d := bw.downFor(); d >= r.cfg.BrokerStepDown {
				stepDown(fmt.Errorf("%w (down for %s)", errStepDown, d.Round(time.Millisecond)))
				return
			}
		}
	}
}

// setLeader sets mailsvc_relay_leader; taking the lease also makes this
// relay the last known leader (LastKnownLeader), which stepping down does
// not undo.
func (r *Relay) setLeader(on bool) {
	if on {
		r.lastLeader.Store(true)
		r.m.Leader.Set(1)
	} else {
		r.m.Leader.Set(0)
	}
}
