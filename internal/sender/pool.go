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
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// Store is what the pool needs from the database; *store.Store implements
// it. Every method is one short statement or transaction.
type Store interface {
	ClaimMails(ctx context.Context, p store.ClaimParams) ([]store.ClaimedMail, error)
	RenewLeases(ctx context.Context, fs []store.Fence, lease time.Duration) ([]store.Fence, error)
	FinishAndStart(ctx context.Context, as []store.Attempt, starts []store.Fence, lease store.StartLease) ([]store.AttemptResult, []store.Started, error)
	ProviderStore
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
	// Fallback, when set, takes a mail when Provider failed in a way that
	// proves it did not take it (mailtype.Reroutable), or while Provider's
	// quota is used up or its breaker is open, or while Provider is slow
	// (the latency guard, latency.go) (sender.fallback_provider). Never a
	// mail with an ambiguous outcome.
	Fallback Provider
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
	// Tracer starts the send span of each provider call (tracing.Provider's
	// "sender" tracer); nil is tracing off.
	Tracer *tracing.Tracer
}

// Pool is the sender pool. A dispatcher claims due rows in batches, never
// more than the workers can start promptly (Workers busy plus
// min(BatchSize, Workers) queued), so that a crash strands few rows; each
// worker marks its row's send as started and only then hands it to the provider on
// its own session, with a deadline inside the lease the mark renewed; a
// writer commits the outcomes and marks of many workers in one transaction
// (group commit), each outcome fenced by its row's token, a worker's
// outcome together with the mark of its next send, so that at any instant
// at most one accepted mail per worker is not yet recorded; a heartbeat renews the
// leases of queued rows. Start, Stop and Wake are safe for concurrent use.
type Pool struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// finishLog is log without the pool's provider attribute: the "mail
	// finished" line names the provider that made the send (the fallback,
	// after a failover), and a JSON line must not carry the key twice.
	finishLog *slog.Logger
	metrics   *Metrics
	rules     rules
	limiter   *rate.Limiter // nil: no per-process rate limit
	lanes     laneShare     // the dispatcher's alone
	// gates are the providers' shared states: the primary first, then the
	// fallback if any.
	gates []*gate

	wake chan struct{}
	// queue holds claimed rows for the workers, writes their outcomes and
	// mark requests for the writer. Both have room for every row the pool
	// may hold, so no send on them blocks for long.
	queue  chan *job
	writes chan *writeRequest
	// renewFailing is set while the heartbeat cannot renew leases: the
	// dispatcher takes no claim then.
	renewFailing atomic.Bool
	// stateFailures counts the failed reads of the providers' shared state
	// in a row (refreshGates).
	stateFailures atomic.Int64

	heldMu sync.Mutex
	held   map[store.Fence]*job
	// unsent counts the held rows queued or being sent (not those whose
	// outcome waits for its write: at most one per worker). maxHeld bounds
	// it; a claim is taken when at least minClaim rows are free.
	unsent            int
	maxHeld, minClaim int
	freed             chan struct{} // a row stopped being held

	life     lifecycle.Life
	recorded chan struct{} // closed when every outcome was written
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
	prefetch := min(cfg.BatchSize, cfg.Workers)
	maxHeld := cfg.Workers + prefetch
	p := &Pool{cfg: cfg, deps: deps, log: deps.Log, metrics: deps.Metrics,
		rules: newRules(cfg, deps.Provider, deps.Templates),
		wake:  make(chan struct{}, 1), queue: make(chan *job, maxHeld),
		writes: make(chan *writeRequest, maxHeld), held: make(map[store.Fence]*job, maxHeld),
		maxHeld: maxHeld, minClaim: max(1, prefetch/2), freed: make(chan struct{}, 1),
		lanes: laneShare{weight: cfg.PriorityWeight}}
	if p.log == nil {
		p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	base := p.log.With("component", "sender")
	p.log, p.finishLog = base.With("provider", deps.Provider.Name()), base
	if p.metrics == nil {
		p.metrics = NewMetrics(nil)
	}
	if cfg.RateLimit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, cfg.BatchSize))
	}
	p.gates = []*gate{newGate(deps.Provider, cfg, deps.Store, deps.Templates, p.metrics, base)}
	if fb := deps.Fallback; fb != nil {
		if fb.Name() == deps.Provider.Name() {
			return nil, fmt.Errorf("sender.fallback_provider: must differ from sender.provider (%s)", fb.Name())
		}
		p.gates = append(p.gates, newGate(fb, cfg, deps.Store, deps.Templates, p.metrics, base))
	}
	for _, g := range p.gates {
		g.lat.limit = slowLimit(cfg, deps.Fallback != nil)
	}
	return p, nil
}

// slowLimit is the most sends at once to a slow provider: the configured
// Config.SlowSendConcurrency, else, with a fallback provider, a quarter of
// the workers (DefaultSlowSendConcurrency), so that the fallback and the
// mails bound to it keep moving; without one, every worker: a lone
// provider gains nothing from fewer sessions but a slower drain, so the
// guard then only reports (docs/design.md, "The latency guard").
func slowLimit(cfg Config, fallback bool) int {
	switch {
	case cfg.SlowSendConcurrency > 0:
		return cfg.SlowSendConcurrency
	case fallback:
		return DefaultSlowSendConcurrency(cfg.Workers)
	}
	return cfg.Workers
}

// Start runs the dispatcher, the workers, the recorder and the heartbeat in
// the background and returns. It follows the rules of internal/lifecycle:
// the background work outlives ctx (only Stop ends it), so that a
// cancelled serve context does not cut sends short before Stop lets them
// finish, and a second Start, or one after Stop, returns
// lifecycle.ErrStarted.
func (p *Pool) Start(ctx context.Context) error {
	return p.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		p.recorded = make(chan struct{})
		p.log.Info("sender started", "workers", p.cfg.Workers, "batch_size", p.cfg.BatchSize)
		return p.run, nil
	})
}

// run is the pool's body: soft is Stop (claim no more, release the
// unstarted rows), hard cuts the sends in flight, after
// Config.ShutdownTimeout or when Stop's context ends (abort).
func (p *Pool) run(soft, abort context.Context) error {
	hard, hardCancel := context.WithCancel(abort)
	defer hardCancel()
	var workers, all sync.WaitGroup
	for range p.cfg.Workers {
		workers.Go(func() { p.runWorker(soft, hard) })
	}
	all.Go(func() {
		workers.Wait()
		close(p.writes)
	})
	all.Go(func() {
		p.writeLoop(soft, hard)
		close(p.recorded)
	})
	all.Go(p.heartbeatLoop)
	stateRead := make(chan struct{})
	all.Go(func() { p.stateLoop(stateRead) })
	all.Go(func() {
		// The first claim waits for the first read of the providers' shared
		// state (a pause or an open breaker another replica wrote).
		select {
		case <-stateRead:
		case <-soft.Done():
		}
		p.dispatch(soft)
	})
	<-soft.Done()
	grace := time.NewTimer(p.cfg.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-p.recorded:
	case <-grace.C:
		p.log.Warn("sender: shutdown timeout; in-flight sends are cancelled and left to their lease")
	case <-abort.Done():
	}
	hardCancel()
	all.Wait()
	p.log.Info("sender stopped")
	return nil
}

// Stop stops claiming, releases the claimed rows whose send has not
// started (back to pending, due now, for another replica), lets the sends
// in flight finish and be recorded within Config.ShutdownTimeout (or until
// ctx ends), then cancels the rest and waits for the goroutines to return.
// A send cut this way is recorded as its error says (often ambiguous); an
// outcome that cannot be written leaves its row `sending` for the janitor.
// Stop is idempotent and safe to call without Start; it returns ctx.Err()
// as soon as ctx ends first (lifecycle.Life.Stop).
func (p *Pool) Stop(ctx context.Context) error {
	return p.life.Stop(ctx)
}

// Done is closed once every goroutine of the pool has returned; Err then
// says why.
func (p *Pool) Done() <-chan struct{} { return p.life.Done() }

// Err is what ended the pool, nil while it runs (lifecycle.Life.Err).
func (p *Pool) Err() error { return p.life.Err() }

// Wake tells the pool that due rows may exist (the consumer inserted some),
// so it claims now instead of at the next poll. It never blocks.
func (p *Pool) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// dispatch claims rows until ctx ends, then closes the queue.
func (p *Pool) dispatch(ctx context.Context) {
	defer close(p.queue)
	failures := 0
	for ctx.Err() == nil {
		if p.renewFailing.Load() {
			p.waitWork(ctx)
			continue
		}
		probe := p.takeProbe()
		if probe == nil && !p.routable() {
			p.waitPaused(ctx)
			continue
		}
		n := p.room(ctx)
		if n == 0 {
			return
		}
		if probe != nil {
			n = 1
		} else if n = p.guardRoom(ctx, n); n == 0 {
			continue
		}
		if n = p.takeTokens(ctx, n); n == 0 {
			return
		}
		claimed, leaseEnd, err := p.claim(ctx, n)
		for i := range claimed {
			j := newJob(claimed[i], leaseEnd)
			j.probe = probe
			p.own(j)
			p.queue <- j
		}
		switch {
		case err != nil:
			failures++
			p.log.Warn("claim mails", "error", err, "failures", failures)
			p.backOff(ctx, backoff.Delay(failures, p.cfg.PollInterval, 30*time.Second))
		case len(claimed) < n:
			failures = 0
			p.waitWork(ctx)
		default:
			failures = 0
		}
	}
}

// room waits until at least minClaim rows are free under maxHeld and
// returns how many to claim (at most BatchSize), or 0 when ctx ended.
// Holding at most Workers + min(BatchSize, Workers) rows keeps the queue
// short: a claimed row starts soon, and a crash strands few unstarted rows
// (they are reclaimed silently once their lease expires).
func (p *Pool) room(ctx context.Context) int {
	for {
		p.heldMu.Lock()
		free := p.maxHeld - p.unsent
		p.heldMu.Unlock()
		if free >= p.minClaim {
			return min(free, p.cfg.BatchSize)
		}
		select {
		case <-p.freed:
		case <-ctx.Done():
			return 0
		}
	}
}

func (p *Pool) own(j *job) {
	p.heldMu.Lock()
	p.held[j.mail.Fence] = j
	p.unsent++
	p.heldMu.Unlock()
}

// sent records that j is no longer queued or being sent; once per job.
func (p *Pool) sent(j *job) {
	if j.sent.Swap(true) {
		return
	}
	p.heldMu.Lock()
	p.unsent--
	p.heldMu.Unlock()
	p.signalFreed()
}

func (p *Pool) signalFreed() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// disown forgets j (its outcome was written, or is left to the janitor).
func (p *Pool) disown(j *job) {
	p.sent(j)
	p.heldMu.Lock()
	delete(p.held, j.mail.Fence)
	p.heldMu.Unlock()
}

// claim runs one claim of up to n rows. A claim that started is not cut
// short by ctx (its rows would be left to the lease); the database timeout
// bounds it. leaseEnd is the lease end on the local clock, conservatively
// counted from before the statement was sent.
func (p *Pool) claim(ctx context.Context, n int) ([]store.ClaimedMail, time.Time, error) {
	leaseEnd := time.Now().Add(p.cfg.Lease)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DBTimeout)
	defer cancel()
	began := time.Now()
	share, weighted := p.lanes.next(n)
	claimed, err := p.deps.Store.ClaimMails(cctx, store.ClaimParams{
		Limit: n, Lease: p.cfg.Lease, Worker: p.cfg.WorkerID, Weighted: weighted, PriorityShare: share})
	p.metrics.ClaimDuration.Observe(time.Since(began).Seconds())
	for i := range claimed {
		p.metrics.Claimed.WithLabelValues(claimed[i].Lane.String()).Inc()
	}
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

// backOff waits d after a failed claim, or less: a wake-up (the consumer
// committed a mail, so the database answers again) ends the wait once
// PollInterval has passed, so that after an outage the pool resumes
// within about PollInterval of the first commit instead of a backoff of up
// to 30 s, while a claim that keeps failing on a working database is
// retried at most once per PollInterval.
func (p *Pool) backOff(ctx context.Context, d time.Duration) {
	floor := min(d, p.cfg.PollInterval)
	sleep(ctx, floor)
	t := time.NewTimer(d - floor)
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
