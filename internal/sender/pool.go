package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

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
	// Clock is the pool's local time: lease ends, send deadlines, the
	// latency guard, pauses as this process sees them, polls, backoffs and
	// the heartbeat. nil is the real clock; tests pass a
	// clockwork.FakeClock. What replicas share (leases, send slots, pause
	// ends) is on the database's clock, which no Clock moves.
	Clock clockwork.Clock
}

// Pool is the sender pool, built of roles, each small (River's producer,
// executors and batch completer are the model; docs/design.md, "The
// sender"): a dispatcher (dispatcher.go) claims due rows in batches and
// holds them (held.go, heartbeat.go); executors (worker.go), one goroutine
// per worker, each with its own provider sessions, mark a row's send as
// started and only then hand it to its provider, with a deadline inside
// the lease the mark renewed, and judge the outcome (decide.go); the
// completer (completer.go) commits the outcomes and marks of many workers
// in one transaction, each fenced by its row's token, a worker's outcome
// together with the mark of its next send, so that at any instant at most
// one accepted mail per worker is not yet recorded; the router (route.go,
// latency.go) keeps the providers' shared state (gate.go). Time comes from
// Deps.Clock. Start, Stop and Wake are safe for concurrent use.
type Pool struct {
	cfg        Config
	log        *slog.Logger
	dispatcher *dispatcher
	executor   *executor
	completer  *completer
	router     *router

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
	if deps.Fallback != nil && deps.Fallback.Name() == deps.Provider.Name() {
		return nil, fmt.Errorf("sender.fallback_provider: must differ from sender.provider (%s)", deps.Fallback.Name())
	}
	if deps.Clock == nil {
		deps.Clock = clockwork.NewRealClock()
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	base := deps.Log.With("component", "sender")
	log := base.With("provider", deps.Provider.Name())
	maxHeld, minClaim := holdBounds(cfg)
	held := newHoldings(maxHeld, minClaim)
	r := newRouter(cfg, deps, log, base)
	c := newCompleter(cfg, deps, deps.Fallback != nil, deps.Metrics, log, base, maxHeld)
	d := &dispatcher{cfg: cfg, clock: deps.Clock, store: deps.Store, log: log, metrics: deps.Metrics, router: r,
		held: held, lanes: laneShare{weight: cfg.PriorityWeight}, wake: make(chan struct{}, 1),
		queue: make(chan *job, maxHeld)}
	if cfg.RateLimit > 0 {
		d.limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, cfg.BatchSize))
	}
	e := &executor{cfg: cfg, clock: deps.Clock, log: log, metrics: deps.Metrics,
		rules: newRules(cfg, deps.Provider, deps.Templates), router: r, completer: c, held: held,
		queue: d.queue, tracer: deps.Tracer}
	return &Pool{cfg: cfg, log: log, dispatcher: d, executor: e, completer: c, router: r}, nil
}

// newRouter builds the gates of the primary provider and the fallback.
func newRouter(cfg Config, deps Deps, log, base *slog.Logger) *router {
	gates := []*gate{newGate(deps.Clock, deps.Provider, cfg, deps.Store, deps.Templates, deps.Metrics, base)}
	if fb := deps.Fallback; fb != nil {
		gates = append(gates, newGate(deps.Clock, fb, cfg, deps.Store, deps.Templates, deps.Metrics, base))
	}
	for _, g := range gates {
		g.lat.limit = slowLimit(cfg, deps.Fallback != nil)
	}
	return &router{clock: deps.Clock, gates: gates, cfg: cfg, log: log, metrics: deps.Metrics}
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

// Start runs the dispatcher, the workers, the completer and the heartbeat in
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
		workers.Go(func() { p.executor.runWorker(soft, hard) })
	}
	all.Go(func() {
		workers.Wait()
		close(p.completer.writes)
	})
	all.Go(func() {
		p.completer.writeLoop(soft, hard)
		close(p.recorded)
	})
	all.Go(func() { p.dispatcher.heartbeatLoop(p.recorded) })
	stateRead := make(chan struct{})
	all.Go(func() { p.router.stateLoop(stateRead, p.recorded) })
	all.Go(func() {
		// The first claim waits for the first read of the providers' shared
		// state (a pause or an open breaker another replica wrote).
		select {
		case <-stateRead:
		case <-soft.Done():
		}
		p.dispatcher.dispatch(soft)
	})
	<-soft.Done()
	grace := p.executor.clock.NewTimer(p.cfg.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-p.recorded:
	case <-grace.Chan():
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
	case p.dispatcher.wake <- struct{}{}:
	default:
	}
}

// sleep waits d on clk, or until ctx ends.
func sleep(clk clockwork.Clock, ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-ctx.Done():
	}
}

// queuePerWorker is how many claimed rows per worker may wait in the
// queue (holdBounds).
const queuePerWorker = 4

// holdBounds returns the most rows a pool holds, Workers being sent plus a
// queue of min(BatchSize, queuePerWorker × Workers), and the fewest rows it
// claims at once, half that queue. A queued row waits for at most
// queuePerWorker sends of each worker, and a crash strands at most the
// queue (reclaimed silently once the leases expire). A queue of one row
// per worker, claimed from half empty, made claims of about 4.5 rows at
// full speed: 0.22 statements a mail where a claim of 16 to 32 rows costs
// 0.03 (docs/benchmarks.md, "Where the statements go").
func holdBounds(cfg Config) (maxHeld, minClaim int) {
	queue := min(cfg.BatchSize, queuePerWorker*cfg.Workers)
	return cfg.Workers + queue, max(1, queue/2)
}
