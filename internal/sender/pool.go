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
	RenewLeases(ctx context.Context, fs []store.Fence, lease time.Duration) ([]store.Fence, error)
	FinishAttempts(ctx context.Context, as []store.Attempt) ([]store.AttemptResult, error)
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

// Pool is the sender pool. A dispatcher claims due rows in batches, never
// more than the pool can start soon (at most Workers + 2*BatchSize rows
// queued or being sent), and queues them for the workers; each worker sends on its own
// provider session; a recorder writes the outcomes of many sends in one
// transaction (group commit), each fenced by its row's token; a heartbeat
// renews the lease of every row the pool owns, so a queued or slow row is
// not overtaken while this process is alive. Start, Stop and Wake are safe
// for concurrent use.
type Pool struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	metrics *Metrics
	limiter *rate.Limiter // nil: no rate limit

	wake chan struct{}
	// queue holds claimed rows for the workers; outcomes holds verdicts for
	// the recorder. Both have room for every row the pool may own, so no
	// send on them blocks.
	queue    chan *job
	outcomes chan result
	// holdUntil (unix nanoseconds) is when a provider's throttle ends.
	holdUntil atomic.Int64

	ownedMu sync.Mutex
	owned   map[store.Fence]*job
	// unsent counts the owned rows queued or being sent; maxUnsent bounds
	// it, maxOwned bounds all owned rows (the rest await their write).
	unsent    int
	maxUnsent int
	maxOwned  int
	freed     chan struct{} // a row was sent or stopped being owned

	mu         sync.Mutex
	state      int // 0 new, 1 running, 2 stopped
	softCancel context.CancelFunc
	hardCancel context.CancelFunc
	recorded   chan struct{} // closed when every outcome was written
	done       chan struct{} // closed when every goroutine returned
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
	maxUnsent := cfg.Workers + 2*cfg.BatchSize
	maxOwned := maxUnsent + 2*maxRecordBatch
	p := &Pool{cfg: cfg, deps: deps, log: deps.Log, metrics: deps.Metrics,
		wake: make(chan struct{}, 1), queue: make(chan *job, maxUnsent), outcomes: make(chan result, maxOwned),
		owned: make(map[store.Fence]*job, maxOwned), maxUnsent: maxUnsent, maxOwned: maxOwned,
		freed: make(chan struct{}, 1)}
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

// Start runs the dispatcher, the workers, the recorder and the heartbeat in
// the background and returns. The background work outlives ctx (only Stop
// ends it), so that a cancelled serve context does not cut sends short
// before Stop lets them finish. It returns an error when the pool was
// started or stopped before.
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
	p.recorded, p.done = make(chan struct{}), make(chan struct{})
	var workers, all sync.WaitGroup
	for range p.cfg.Workers {
		workers.Go(func() { p.runWorker(hard) })
	}
	all.Go(func() {
		workers.Wait()
		close(p.outcomes)
	})
	all.Go(func() {
		p.recordLoop(hard)
		close(p.recorded)
	})
	all.Go(p.heartbeatLoop)
	all.Go(func() { p.dispatch(soft) })
	go func() {
		all.Wait()
		close(p.done)
	}()
	p.log.Info("sender started", "workers", p.cfg.Workers, "batch_size", p.cfg.BatchSize)
	return nil
}

// Stop stops claiming, lets the rows already claimed be sent and recorded
// within Config.ShutdownTimeout (or until ctx ends), then cancels the rest
// and waits for the goroutines to return. A send cancelled this way, or a
// claimed row not yet sent, records nothing: its row stays `sending` until
// the lease expires and a worker reclaims it. Stop is idempotent and safe
// to call without Start; it returns ctx.Err() when ctx ended first.
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
	case <-p.recorded:
	case <-grace.C:
		p.log.Warn("sender: shutdown timeout; in-flight sends are cancelled and left to their lease")
	case <-ctx.Done():
	}
	p.hardCancel()
	select {
	case <-p.done:
		p.log.Info("sender stopped")
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

// dispatch claims rows until ctx ends, then closes the queue.
func (p *Pool) dispatch(ctx context.Context) {
	defer close(p.queue)
	failures := 0
	for ctx.Err() == nil {
		if !p.waitHold(ctx) {
			return
		}
		n := p.room(ctx)
		if n == 0 {
			return
		}
		if n = p.takeTokens(ctx, n); n == 0 {
			return
		}
		claimed, leaseEnd, err := p.claim(ctx, n)
		for i := range claimed {
			j := newJob(claimed[i], leaseEnd)
			p.own(j)
			p.queue <- j
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

// room waits until a whole batch fits under maxUnsent and maxOwned and
// returns the batch size, or 0 when ctx ended. Claiming whole batches keeps
// one claim statement per BatchSize rows under load; maxUnsent keeps the
// queue short, so a claimed row is sent soon. Rows whose outcome waits for
// the recorder do not hold the dispatcher back (up to maxOwned): a slow
// commit grows the next write's batch instead of idling the workers.
func (p *Pool) room(ctx context.Context) int {
	for {
		p.ownedMu.Lock()
		free := min(p.maxUnsent-p.unsent, p.maxOwned-len(p.owned))
		p.ownedMu.Unlock()
		if free >= p.cfg.BatchSize {
			return p.cfg.BatchSize
		}
		select {
		case <-p.freed:
		case <-ctx.Done():
			return 0
		}
	}
}

func (p *Pool) own(j *job) {
	p.ownedMu.Lock()
	p.owned[j.mail.Fence] = j
	p.unsent++
	p.ownedMu.Unlock()
}

// sent records that a worker is done with j's send (or skipped it).
func (p *Pool) sent() {
	p.ownedMu.Lock()
	p.unsent--
	p.ownedMu.Unlock()
	p.signalFreed()
}

func (p *Pool) signalFreed() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// disown forgets j (its outcome was written, or is left to the lease).
func (p *Pool) disown(j *job) {
	p.ownedMu.Lock()
	delete(p.owned, j.mail.Fence)
	p.ownedMu.Unlock()
	p.signalFreed()
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

// takeTokens waits for one rate-limit token and takes up to n-1 more that
// are available now. It returns how many rows may be claimed, 0 when ctx
// ended.
func (p *Pool) takeTokens(ctx context.Context, n int) int {
	if p.limiter == nil {
		return n
	}
	if err := p.limiter.Wait(ctx); err != nil {
		return 0
	}
	got := 1
	if extra := min(n-1, int(p.limiter.Tokens())); extra > 0 && p.limiter.AllowN(time.Now(), extra) {
		got += extra
	}
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
