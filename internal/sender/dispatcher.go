package sender

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/store"
)

// dispatcher is the pool's producer: it claims due rows in batches, never
// more than the workers can start promptly (Workers busy plus
// min(BatchSize, 4 × Workers) queued: holdBounds), so that a crash strands
// few rows, and
// queues them for the executors; the heartbeat (heartbeat.go) renews the
// leases of the rows it holds. It claims nothing while every route is
// paused, while the latency guard holds the pool back, or while leases
// cannot be renewed; it serves the lanes by weight (lanes.go) and keeps
// to sender.rate_limit on the pool's clock.
type dispatcher struct {
	cfg     Config
	clock   clockwork.Clock
	store   Store
	log     *slog.Logger
	metrics *Metrics
	router  *router
	held    *holdings
	limiter *rate.Limiter // nil: no per-process rate limit
	lanes   laneShare     // the dispatcher's alone
	wake    chan struct{}
	// queue holds claimed rows for the executors. It has room for every
	// row the pool may hold, so no send on it blocks for long.
	queue chan *job
	// mu guards closed, set once the dispatcher closed queue: rows handed
	// over (handover.go) are queued from the consumer's goroutine.
	mu     sync.Mutex
	closed bool
}

// closeQueue closes the queue: no row is queued after it.
func (d *dispatcher) closeQueue() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	close(d.queue)
}

// dispatch claims rows until ctx ends, then closes the queue.
func (d *dispatcher) dispatch(ctx context.Context) {
	defer d.closeQueue()
	failures := 0
	for ctx.Err() == nil {
		if d.held.renewFailing.Load() {
			d.waitWork(ctx)
			continue
		}
		probe := d.router.takeProbe()
		if probe == nil && !d.router.routable() {
			d.router.waitPaused(ctx)
			continue
		}
		n := d.held.room(ctx, d.cfg.BatchSize)
		if n == 0 {
			return
		}
		if probe != nil {
			n = 1
		} else if n = d.router.guardRoom(ctx, n, d.held); n == 0 {
			continue
		}
		if n = d.takeTokens(ctx, n); n == 0 {
			return
		}
		claimed, leaseEnd, err := d.claim(ctx, n)
		for i := range claimed {
			j := newJob(claimed[i], leaseEnd)
			j.probe = probe
			d.held.own(j)
			d.queue <- j
		}
		switch {
		case err != nil:
			failures++
			d.log.Warn("claim mails", "error", err, "failures", failures)
			d.backOff(ctx, backoff.Delay(failures, d.cfg.PollInterval, 30*time.Second))
		case len(claimed) < n:
			failures = 0
			d.waitWork(ctx)
		default:
			failures = 0
		}
	}
}

// claim runs one claim of up to n rows. A claim that started is not cut
// short by ctx (its rows would be left to the lease); the database timeout
// bounds it. leaseEnd is the lease end on the local clock, conservatively
// counted from before the statement was sent.
func (d *dispatcher) claim(ctx context.Context, n int) ([]store.ClaimedMail, time.Time, error) {
	leaseEnd := d.clock.Now().Add(d.cfg.Lease)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.DBTimeout)
	defer cancel()
	began := d.clock.Now()
	share, weighted := d.lanes.next(n)
	claimed, err := d.store.ClaimMails(cctx, store.ClaimParams{
		Limit: n, Lease: d.cfg.Lease, Worker: d.cfg.WorkerID, Weighted: weighted, PriorityShare: share})
	d.metrics.ClaimDuration.Observe(d.clock.Since(began).Seconds())
	for i := range claimed {
		d.metrics.Claimed.WithLabelValues(claimed[i].Lane.String()).Inc()
	}
	return claimed, leaseEnd, err
}

// takeTokens waits for one rate-limit token and takes up to n-1 more that
// are available now. It returns how many rows may be claimed, 0 when ctx
// ended.
func (d *dispatcher) takeTokens(ctx context.Context, n int) int {
	if d.limiter == nil {
		return n
	}
	r := d.limiter.ReserveN(d.clock.Now(), 1)
	if wait := r.DelayFrom(d.clock.Now()); wait > 0 {
		sleep(d.clock, ctx, wait)
	}
	if ctx.Err() != nil {
		r.CancelAt(d.clock.Now())
		return 0
	}
	got := 1
	now := d.clock.Now()
	if extra := min(n-1, int(d.limiter.TokensAt(now))); extra > 0 && d.limiter.AllowN(now, extra) {
		got += extra
	}
	return got
}

// waitWork waits for a wake-up, the poll interval or ctx. Meanwhile rows
// may be handed over (holdings.idle).
func (d *dispatcher) waitWork(ctx context.Context) {
	d.held.setIdle(true)
	defer d.held.setIdle(false)
	t := d.clock.NewTimer(d.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-d.wake:
	case <-t.Chan():
	case <-ctx.Done():
	}
}

// backOff waits wait after a failed claim, or less: a wake-up (the consumer
// committed a mail, so the database answers again) ends the wait once
// PollInterval has passed, so that after an outage the pool resumes
// within about PollInterval of the first commit instead of a backoff of up
// to 30 s, while a claim that keeps failing on a working database is
// retried at most once per PollInterval.
func (d *dispatcher) backOff(ctx context.Context, wait time.Duration) {
	floor := min(wait, d.cfg.PollInterval)
	sleep(d.clock, ctx, floor)
	t := d.clock.NewTimer(wait - floor)
	defer t.Stop()
	select {
	case <-d.wake:
	case <-t.Chan():
	case <-ctx.Done():
	}
}
