package sender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// Store is what the pool needs from the database; *store.Store implements
// it. Every method is one short statement or transaction.
type Store interface {
	ClaimMails(ctx context.Context, p store.ClaimParams) ([]store.ClaimedMail, error)
	RenewLease(ctx context.Context, f store.Fence, lease time.Duration) error
	FinishAttempt(ctx context.Context, f store.Fence, o store.Outcome) (store.Finished, error)
}

// TemplateSettings gives per-template settings; *templates.Registry
// implements it.
type TemplateSettings interface {
	Settings(name string) (templates.Settings, error)
}

// Deps are what a Pool is built from.
type Deps struct {
	// Store and Provider are required.
	Store    Store
	Provider Provider
	// Metrics may be shared; nil means unregistered metrics.
	Metrics *Metrics
	// Log receives the pool's logs; nil discards them.
	Log *slog.Logger
	// Templates, when set, may override Config.AmbiguousPolicy per template.
	Templates TemplateSettings
	// OnOutboxWritten, when set, is called after a terminal transition wrote
	// its feedback event (an in-process wake-up of the relay). It must not
	// block.
	OnOutboxWritten func()
}

// Pool is the sender pool: workers that claim due mails, send them and
// record the outcomes. Start, Stop and Wake are safe for concurrent use.
type Pool struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	metrics *Metrics
	limiter *rate.Limiter // nil: no rate limit

	wake chan struct{}
	// idle holds one token per idle worker; the dispatcher claims only as
	// many rows as it holds tokens, so a claimed row never waits.
	idle chan struct{}
	jobs chan *job
	// holdUntil (unix nanoseconds) is when a provider's throttle ends.
	holdUntil atomic.Int64

	mu          sync.Mutex
	state       int // 0 new, 1 running, 2 stopped
	softCancel  context.CancelFunc
	hardCancel  context.CancelFunc
	workersDone chan struct{}
}

// New returns a Pool that has not started. It returns an error naming the
// config key when cfg (after WithDefaults) is invalid, or when a dependency
// is missing.
func New(cfg Config, deps Deps) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sender config: %w", err)
	}
	if deps.Store == nil || deps.Provider == nil {
		return nil, errors.New("sender: a store and a provider are required")
	}
	p := &Pool{cfg: cfg, deps: deps, log: deps.Log, metrics: deps.Metrics,
		wake: make(chan struct{}, 1), idle: make(chan struct{}, cfg.Workers), jobs: make(chan *job)}
	if p.log == nil {
		p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p.log = p.log.With("component", "sender", "provider", deps.Provider.Name())
	if p.metrics == nil {
		p.metrics = NewMetrics(nil)
	}
	if cfg.RateLimit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, cfg.BatchSize))
	}
	return p, nil
}

// Start runs the workers and the dispatcher in the background and returns.
// The background work outlives ctx (only Stop ends it), so that a cancelled
// serve context does not cut sends short before Stop lets them finish. It
// returns an error when the pool was started or stopped before.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != 0 {
		return errors.New("sender: Start called twice or after Stop")
	}
	p.state = 1
	base := context.WithoutCancel(ctx)
	soft, softCancel := context.WithCancel(base)
	hard, hardCancel := context.WithCancel(base)
	p.softCancel, p.hardCancel = softCancel, hardCancel
	p.workersDone = make(chan struct{})
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		p.idle <- struct{}{}
		wg.Go(func() { p.runWorker(hard) })
	}
	go func() {
		wg.Wait()
		close(p.workersDone)
	}()
	go p.dispatch(soft)
	p.log.Info("sender started", "workers", p.cfg.Workers, "batch_size", p.cfg.BatchSize)
	return nil
}

// Stop stops claiming, lets in-flight sends finish within
// Config.ShutdownTimeout (or until ctx ends), then cancels the rest and
// waits for the workers to return. A send cancelled this way records
// nothing: its row stays `sending` until the lease expires and another
// worker reclaims it. Stop is idempotent and safe to call without Start;
// it returns ctx.Err() when ctx ended before the workers returned.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	state := p.state
	p.state = 2
	p.mu.Unlock()
	if state != 1 {
		return nil
	}
	p.softCancel()
	grace := time.NewTimer(p.cfg.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-p.workersDone:
		p.hardCancel()
		p.log.Info("sender stopped")
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	p.hardCancel()
	select {
	case <-p.workersDone:
		p.log.Warn("sender stopped; in-flight sends were cancelled and are left to their lease")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop sender: %w", ctx.Err())
	}
}

// Wake tells the pool that due rows may exist (the consumer inserted some),
// so it claims now instead of at the next poll. It never blocks.
func (p *Pool) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// hold makes the dispatcher take no claim for d (a provider's throttle).
func (p *Pool) hold(d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for {
		cur := p.holdUntil.Load()
		if cur >= until || p.holdUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// dispatch claims rows for idle workers until ctx ends, then closes jobs.
func (p *Pool) dispatch(ctx context.Context) {
	defer close(p.jobs)
	failures := 0
	for ctx.Err() == nil {
		if !p.waitHold(ctx) {
			return
		}
		n := p.acquireIdle(ctx)
		if n == 0 {
			return
		}
		if n = p.takeTokens(ctx, n); n == 0 {
			return
		}
		claimed, leaseEnd, err := p.claim(ctx, n)
		p.releaseIdle(n - len(claimed))
		for i := range claimed {
			p.jobs <- newJob(claimed[i], leaseEnd)
		}
		switch {
		case err != nil:
			failures++
			p.log.Warn("claim mails", "error", err, "failures", failures)
			sleep(ctx, backoff.Delay(failures, p.cfg.PollInterval, 30*time.Second))
		case len(claimed) < n:
			failures = 0
			p.waitWork(ctx)
		default:
			failures = 0
		}
	}
}

// claim runs one claim of up to n rows. A claim that started is not cut
// short by ctx (its rows would be left to the lease); the database timeout
// bounds it. leaseEnd is the lease end on the local clock, conservatively
// counted from before the statement was sent.
func (p *Pool) claim(ctx context.Context, n int) ([]store.ClaimedMail, time.Time, error) {
	leaseEnd := time.Now().Add(p.cfg.Lease)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DBTimeout)
	defer cancel()
	claimed, err := p.deps.Store.ClaimMails(cctx, store.ClaimParams{
		Limit: n, Lease: p.cfg.Lease, Worker: p.cfg.WorkerID, MaxAttempts: p.cfg.MaxAttempts})
	return claimed, leaseEnd, err
}

// acquireIdle waits for one idle worker and takes up to BatchSize, without
// waiting for more. It returns 0 when ctx ended.
func (p *Pool) acquireIdle(ctx context.Context) int {
	select {
	case <-p.idle:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < p.cfg.BatchSize {
		select {
		case <-p.idle:
			n++
		default:
			return n
		}
	}
	return n
}

func (p *Pool) releaseIdle(n int) {
	for range n {
		p.idle <- struct{}{}
	}
}

// takeTokens waits for one rate-limit token and takes up to n-1 more that
// are available now, releasing the idle workers it cannot use. It returns
// how many rows may be claimed, 0 when ctx ended.
func (p *Pool) takeTokens(ctx context.Context, n int) int {
	if p.limiter == nil {
		return n
	}
	if err := p.limiter.Wait(ctx); err != nil {
		p.releaseIdle(n)
		return 0
	}
	got := 1
	if extra := min(n-1, int(p.limiter.Tokens())); extra > 0 && p.limiter.AllowN(time.Now(), extra) {
		got += extra
	}
	p.releaseIdle(n - got)
	return got
}

// waitHold sleeps while a provider throttle is in force; false when ctx
// ended.
func (p *Pool) waitHold(ctx context.Context) bool {
	if d := time.Until(time.Unix(0, p.holdUntil.Load())); d > 0 {
		sleep(ctx, d)
	}
	return ctx.Err() == nil
}

// waitWork waits for a wake-up, the poll interval or ctx.
func (p *Pool) waitWork(ctx context.Context) {
	t := time.NewTimer(p.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-p.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	backoff.Sleep(ctx.Done(), d)
}
