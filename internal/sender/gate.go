package sender

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// ProviderStore is the shared provider state the pool needs; *store.Store
// implements it. Every method is one short statement.
type ProviderStore interface {
	TakeSendSlots(ctx context.Context, provider string, n int, interval time.Duration, probe bool) (store.Slots, error)
	PauseProvider(ctx context.Context, provider string, reason mailtype.PauseReason, d time.Duration, errText string) (store.ProviderState, error)
	CountProviderFailure(ctx context.Context, provider string, threshold int, probe time.Duration, errText string) (store.ProviderState, bool, error)
	TakeProbe(ctx context.Context, provider, worker string, next time.Duration) (store.ProviderState, bool, error)
	ProviderRecovered(ctx context.Context, provider string, all bool) (store.ProviderState, error)
	ProviderState(ctx context.Context, provider string) (store.ProviderState, error)
}

// slotWindow is how far ahead one round trip reserves send slots: at
// rate r, max(1, r × slotWindow) slots, so a high rate costs one round
// trip per batch of mails, not per mail.
const slotWindow = 50 * time.Millisecond

// slotGuard stretches the interval between send slots: the pool paces at
// rate / slotGuard (98% of the limit), which leaves 20 ms of every second
// for timing jitter (the mark's commit, the network), so a provider that
// counts requests in a sliding one-second window sees at most the limit
// while sends start within 20 ms of their slots.
const slotGuard = 1.02

// errPaused: the provider is paused; no slot is handed out.
var errPaused = errors.New("provider paused")

// gate is the pool's view of one provider's shared state (table
// provider_state): its deployment-wide rate limit (send slots), its pause
// and its circuit breaker. What one replica learns (a 429, a quota, a run
// of configuration failures) is written there at once; what the others
// learned is read back every poll interval, and with every batch of slots.
// Safe for concurrent use.
type gate struct {
	clock clockwork.Clock
	prov  Provider
	name  string
	st    ProviderStore
	rules rules
	cfg   Config
	m     *Metrics
	log   *slog.Logger
	// interval is 1 / the rate limit; 0 means no limit (and no round trip
	// per mail). batch slots are reserved per round trip; a slot more than
	// late behind its time when a worker takes it is dropped (the burst
	// bound, docs/design.md).
	interval time.Duration
	batch    int
	late     time.Duration

	// live counts the pool's sessions of this provider whose last send
	// succeeded (a session that failed is replaced, see liveSession):
	// while one is live, a refused session (TroubleBusy) is the
	// provider's cap of sessions, not an outage.
	live atomic.Int64
	// lat is the provider's latency guard (latency.go).
	lat *latency

	mu    sync.Mutex
	state store.ProviderState
	// writes counts this replica's writes of the shared state, each once
	// as it starts and once as it ends (gate.db): a refresh that
	// overlapped one may have read the row before the write committed, so
	// its older view is dropped (the write's own answer is newer), lest a
	// breaker just opened look closed.
	writes  uint64
	readAt  time.Time // local time of the read of state
	slots   []time.Time
	filling chan struct{} // closed when the running refill is done
	waiting int
}

// atCap reports whether err is a session the provider refused while a
// session of this pool is live: its cap of sessions, not an outage. The
// caller asks before it settles its own session (reply.atCap).
func (g *gate) atCap(err error) bool {
	t, _ := TroubleOf(err)
	return t == TroubleBusy && g.live.Load() > 0
}

func newGate(clock clockwork.Clock, prov Provider, cfg Config, st ProviderStore, tmpl TemplateSettings, m *Metrics, log *slog.Logger) *gate {
	g := &gate{clock: clock, prov: prov, name: prov.Name(), st: st, rules: newRules(cfg, prov, tmpl), cfg: cfg, m: m,
		log: log.With("provider", prov.Name()), lat: newLatency(cfg)}
	g.state = store.ProviderState{Provider: g.name, Now: g.clock.Now()}
	g.readAt = g.state.Now
	if r := cfg.RateLimits[g.name]; r > 0 {
		g.interval = time.Duration(slotGuard * float64(time.Second) / r)
		g.batch = max(1, int(r*slotWindow.Seconds()))
		g.late = max(g.interval/2, slotWindow)
	}
	return g
}

// limited reports whether the provider has a rate limit.
func (g *gate) limited() bool { return g.interval > 0 }

// pausedUntil reports whether the provider is paused now (local view),
// its reason and when the pause ends or probes (local clock).
func (g *gate) pausedUntil() (bool, mailtype.PauseReason, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pausedLocked(g.clock.Now())
}

func (g *gate) pausedLocked(now time.Time) (bool, mailtype.PauseReason, time.Time) {
	st := g.state
	until := g.readAt.Add(st.PausedUntil.Sub(st.Now))
	switch {
	case st.Reason.Probed():
		return true, st.Reason, until
	case st.Reason == mailtype.PauseRateLimited && until.After(now):
		return true, st.Reason, until
	}
	return false, "", time.Time{}
}

// paused reports whether the provider takes no send but a probe.
func (g *gate) paused() bool {
	p, _, _ := g.pausedUntil()
	return p
}

// observe takes a state read at local time at as the gate's view, logs
// the transitions it shows and sets mailsvc_provider_paused.
func (g *gate) observe(st store.ProviderState, at time.Time) {
	g.observeRead(st, at, 0, false)
}

// observeRead is observe for a read that began when the gate had started
// gen writes: with checked set, it is dropped when a write started since.
func (g *gate) observeRead(st store.ProviderState, at time.Time, gen uint64, checked bool) {
	g.mu.Lock()
	if checked && g.writes != gen {
		g.mu.Unlock()
		return
	}
	was, wasReason, _ := g.pausedLocked(at)
	g.state, g.readAt = st, at
	now, reason, until := g.pausedLocked(at)
	if now && reason != mailtype.PauseRateLimited {
		g.slots = nil
	}
	g.mu.Unlock()
	for _, r := range mailtype.PauseReasons {
		v := 0.0
		if now && r == reason {
			v = 1
		}
		g.m.Paused.WithLabelValues(g.name, string(r)).Set(v)
	}
	switch {
	case now && (!was || reason != wasReason):
		lvl := slog.LevelError
		if reason == mailtype.PauseRateLimited {
			lvl = slog.LevelWarn
		}
		when := "until" // a rate limit ends by itself; a quota or breaker pause ends with a probe
		if reason.Probed() {
			when = "next_probe"
		}
		g.log.Log(context.Background(), lvl, "provider paused: no mail is sent through it (mails wait in pending, no attempt spent)",
			"reason", reason, when, until.UTC().Format(time.RFC3339Nano), "since", st.PausedAt.UTC().Format(time.RFC3339),
			"failures", st.Failures, "error", st.Error)
	case was && !now:
		g.log.Info("provider resumed", "reason", wasReason)
	}
}

// refresh reads the shared state.
func (g *gate) refresh(ctx context.Context) error {
	g.mu.Lock()
	gen := g.writes
	g.mu.Unlock()
	st, err := g.st.ProviderState(ctx, g.name)
	if err != nil {
		return err
	}
	g.observeRead(st, g.clock.Now(), gen, true)
	return nil
}

// wrote records that a write of the shared state starts (gate.writes).
func (g *gate) wrote() {
	g.mu.Lock()
	g.writes++
	g.mu.Unlock()
}

// slot returns the local time the next send may start at, reserving a
// batch of slots from the shared row when none is left (one round trip
// for every waiting worker). Without a rate limit it returns the zero time
// at once. errPaused when the provider is paused; a database error as it
// came.
func (g *gate) slot(ctx context.Context) (time.Time, error) {
	if !g.limited() {
		return time.Time{}, nil
	}
	g.mu.Lock()
	for {
		now := g.clock.Now()
		for len(g.slots) > 0 && now.Sub(g.slots[0]) > g.late {
			g.slots = g.slots[1:] // too late to use without a burst: wasted
		}
		if len(g.slots) > 0 {
			s := g.slots[0]
			g.slots = g.slots[1:]
			g.mu.Unlock()
			return s, nil
		}
		if p, _, _ := g.pausedLocked(now); p {
			g.mu.Unlock()
			return time.Time{}, errPaused
		}
		if ch := g.filling; ch != nil {
			g.waiting++
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				g.mu.Lock()
				g.waiting--
				g.mu.Unlock()
				return time.Time{}, ctx.Err()
			}
			g.mu.Lock()
			g.waiting--
			continue
		}
		n := max(g.batch, g.waiting+1)
		ch := make(chan struct{})
		g.filling = ch
		g.mu.Unlock()
		err := g.refill(ctx, n, false)
		g.mu.Lock()
		g.filling = nil
		close(ch)
		if err != nil {
			g.mu.Unlock()
			return time.Time{}, err
		}
	}
}

// probeSlot reserves one slot for a probe, which a pause does not stop.
func (g *gate) probeSlot(ctx context.Context) (time.Time, error) {
	if !g.limited() {
		return time.Time{}, nil
	}
	sl, err := g.take(ctx, 1, true)
	if err != nil {
		return time.Time{}, err
	}
	return sl[0], nil
}

// refill reserves n slots into the gate's pool.
func (g *gate) refill(ctx context.Context, n int, probe bool) error {
	sl, err := g.take(ctx, n, probe)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.slots = append(g.slots, sl...)
	g.mu.Unlock()
	return nil
}

// take reserves n slots and converts them to the local clock: the slot's
// distance from the database's now(), counted from when the answer came
// back, so a slot is never taken earlier than it is (only later, by at
// most the round trip).
func (g *gate) take(ctx context.Context, n int, probe bool) ([]time.Time, error) {
	sctx, cancel := context.WithTimeout(ctx, g.cfg.DBTimeout)
	defer cancel()
	g.wrote()
	res, err := g.st.TakeSendSlots(sctx, g.name, n, g.interval, probe)
	if err != nil {
		return nil, err
	}
	at := g.clock.Now()
	g.observe(res.State, at)
	if res.First.IsZero() {
		return nil, errPaused
	}
	first := at.Add(res.First.Sub(res.State.Now))
	out := make([]time.Time, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * g.interval)
	}
	return out, nil
}

// db runs one provider-state write under the pool's statement timeout,
// counting it in g.writes before and after, so that no refresh that
// overlapped it replaces its result. A write that fails is logged: the local view still changes (the caller
// passes what it learned), and the next refresh corrects it.
func (g *gate) db(what string, f func(context.Context) (store.ProviderState, error)) (store.ProviderState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.DBTimeout)
	defer cancel()
	g.wrote()
	st, err := f(ctx)
	// Again once the write is done: a refresh that began during it may
	// have read the state from before its commit, and must not overwrite
	// what the write returned (with it, a breaker that had just opened
	// read as closed until the next refresh, and one more mail was sent).
	g.wrote()
	if err != nil {
		g.log.Warn("provider state: "+what+" not shared with other replicas (the database refused it)", "error", err)
		return st, false
	}
	g.observe(st, g.clock.Now())
	return st, true
}

// pause pauses the provider for every replica for d with reason.
func (g *gate) pause(reason mailtype.PauseReason, d time.Duration, errText string) {
	if _, ok := g.db("pause", func(ctx context.Context) (store.ProviderState, error) {
		return g.st.PauseProvider(ctx, g.name, reason, d, errText)
	}); !ok {
		now := g.clock.Now()
		g.observe(store.ProviderState{Provider: g.name, Reason: reason, PausedUntil: now.Add(d), PausedAt: now, Error: errText, Now: now}, now)
	}
}

// failure counts a configuration failure or an outage (trouble); the one
// that makes Config.BreakerThreshold in a row (across replicas) opens the
// breaker. It returns the failures in a row after this one, 0 when the
// database did not count it.
func (g *gate) failure(trouble Trouble, errText string) int {
	if trouble == TroubleOutage {
		g.m.OutageFailures.WithLabelValues(g.name).Inc()
	} else {
		g.m.ConfigFailures.WithLabelValues(g.name).Inc()
	}
	var tripped bool
	first := min(store.ProbeFloor, g.cfg.BreakerProbe)
	st, ok := g.db("failure count", func(ctx context.Context) (store.ProviderState, error) {
		st, t, err := g.st.CountProviderFailure(ctx, g.name, g.cfg.BreakerThreshold, first, errText)
		tripped = t
		return st, err
	})
	if tripped {
		g.log.Error("circuit breaker opened: the provider fails for every mail (its configuration, its reachability or an outage); probing with one mail after "+
			first.String()+", then at doubling intervals up to "+g.cfg.BreakerProbe.String(),
			"failures", g.cfg.BreakerThreshold, "error", errText)
	}
	if !ok {
		return 0
	}
	return st.Failures
}

// recovered records a send that got past every configuration check. A
// probe ends every pause; otherwise only a run of failures or an open
// breaker needs a write, so a healthy provider costs none.
func (g *gate) recovered(probe bool) {
	g.mu.Lock()
	need := probe || g.state.Failures > 0 || g.state.Reason == mailtype.PauseBreaker
	g.state.Failures = 0
	g.mu.Unlock()
	if !need {
		return
	}
	g.db("recovery", func(ctx context.Context) (store.ProviderState, error) {
		return g.st.ProviderRecovered(ctx, g.name, probe)
	})
	if probe {
		g.log.Info("probe succeeded: provider resumed")
	}
}

// takeProbe tries to take the provider's probe when its time came (local
// view); true for one worker of the deployment per probe period.
func (g *gate) takeProbe(worker string) bool {
	p, reason, until := g.pausedUntil()
	if !p || !reason.Probed() || g.clock.Now().Before(until) {
		return false
	}
	var won bool
	g.db("probe", func(ctx context.Context) (store.ProviderState, error) {
		st, w, err := g.st.TakeProbe(ctx, g.name, worker, g.probeInterval(reason))
		won = w
		return st, err
	})
	if won {
		g.log.Info("probing the paused provider with one mail", "reason", reason)
	}
	return won
}

// probeInterval is the time between probes of a pause of reason.
func (g *gate) probeInterval(reason mailtype.PauseReason) time.Duration {
	if reason == mailtype.PauseQuota {
		return g.cfg.QuotaProbe
	}
	return g.cfg.BreakerProbe
}

// failsOver reports whether a pause of the provider lets the fallback
// take its mails: a quota or an open breaker, not a rate limit (which
// passes in seconds).
func (g *gate) failsOver() bool {
	p, reason, _ := g.pausedUntil()
	return p && reason.Probed()
}

// resumedAt is when the provider's last quota or breaker pause ended,
// on the local clock; zero when none did.
func (g *gate) resumedAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state.ResumedAt.IsZero() {
		return time.Time{}
	}
	return g.readAt.Add(g.state.ResumedAt.Sub(g.state.Now))
}
