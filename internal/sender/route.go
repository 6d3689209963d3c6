package sender

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// router is where the pool meets the providers' shared state (gate.go):
// which provider a mail goes to, when the dispatcher claims nothing
// because every route is paused, the probes of a paused provider, the
// refresh of what other replicas learned, and the latency guard
// (latency.go). Safe for concurrent use: a gate guards its own state.
type router struct {
	clock clockwork.Clock
	// gates are the providers' shared states: the primary first, then the
	// fallback if any.
	gates   []*gate
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	// stateFailures counts the failed reads of the providers' shared state
	// in a row (refreshGates).
	stateFailures atomic.Int64
}

// primary is the provider of sender.provider.
func (r *router) primary() *gate { return r.gates[0] }

// fallback is the provider of sender.fallback_provider, nil without one.
func (r *router) fallback() *gate {
	if len(r.gates) > 1 {
		return r.gates[1]
	}
	return nil
}

// gateNamed returns the gate of the provider called name, nil for none.
func (r *router) gateNamed(name string) *gate {
	for _, g := range r.gates {
		if g.name == name {
			return g
		}
	}
	return nil
}

// refreshGates reads every provider's shared state once (best effort;
// a failure keeps the last view). While the database fails it logs the
// first failure and every 30th.
func (r *router) refreshGates() {
	for _, g := range r.gates {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.DBTimeout)
		err := g.refresh(ctx)
		cancel()
		switch n := r.stateFailures.Load(); {
		case err != nil:
			if n = r.stateFailures.Add(1); n == 1 || n%30 == 0 {
				g.log.Warn("read the provider's shared state (pauses, breaker): the last one read stays in force",
					"failures", n, "error", err)
			}
		case n > 0:
			r.stateFailures.Store(0)
			r.log.Info("the providers' shared state is readable again", "failures", n)
		}
	}
}

// stateLoop reads what the other replicas learned about the providers
// (pauses, the breaker) at once, closing read after that first attempt,
// then every poll interval until every outcome was recorded: one round
// trip per provider per interval, none per mail.
func (r *router) stateLoop(read chan<- struct{}, done <-chan struct{}) {
	r.refreshGates()
	close(read)
	every(r.clock, r.cfg.PollInterval, done, r.refreshGates)
}

// route picks the provider of a job's send, nil when none may take it now.
// A probe goes to the paused provider it probes. A mail with an ambiguous
// outcome is only sent again through the provider of that outcome: another
// one could deliver it a second time. Otherwise the primary, unless it is
// paused; then the fallback, when the primary's pause is one it covers (a
// quota, an open breaker; not a rate limit, which passes in seconds).
func (r *router) route(j *job) *gate {
	m := &j.mail
	if j.probe != nil && (m.Ambiguous == 0 || m.Provider == j.probe.name) {
		return j.probe
	}
	j.probe = nil
	if m.Ambiguous > 0 {
		g := r.gateNamed(m.Provider)
		if g == nil {
			g = r.primary()
		}
		if g.paused() {
			return nil
		}
		return g
	}
	if !r.primary().paused() {
		return r.primary()
	}
	if fb := r.fallback(); fb != nil && r.primary().failsOver() && !fb.paused() {
		return fb
	}
	return nil
}

// routable reports whether some mail can be sent now: the primary is not
// paused, or the fallback covers its pause.
func (r *router) routable() bool {
	if !r.primary().paused() {
		return true
	}
	fb := r.fallback()
	return fb != nil && r.primary().failsOver() && !fb.paused()
}

// takeProbe takes the probe of a paused provider whose probe time came,
// for one worker of the deployment; nil when there is none to take.
func (r *router) takeProbe() *gate {
	for _, g := range r.gates {
		if g.takeProbe(r.cfg.WorkerID) {
			return g
		}
	}
	return nil
}

// resumeIn is how long until a paused route may take mails again (the
// earliest pause end or probe among the gates), within [PollInterval, a
// minute]: what a mail that found no route waits before its next claim.
func (r *router) resumeIn() time.Duration {
	d, paused := time.Minute, false
	now := r.clock.Now()
	for _, g := range r.gates {
		if ok, _, until := g.pausedUntil(); ok {
			d, paused = min(d, until.Sub(now)), true
		}
	}
	if !paused || r.guardEngaged() {
		// The pause that kept the mail back ended meanwhile (a rate
		// limit's, at its time), or the latency guard did: due at once,
		// not a minute later.
		d = r.cfg.PollInterval
	}
	return max(d, r.cfg.PollInterval)
}

// waitPaused waits, while no route is open, until the earliest pause end
// or probe time, at most a poll interval (the next refresh may end it).
func (r *router) waitPaused(ctx context.Context) {
	d := r.cfg.PollInterval
	now := r.clock.Now()
	for _, g := range r.gates {
		if paused, _, until := g.pausedUntil(); paused {
			d = min(d, max(until.Sub(now), time.Millisecond))
		}
	}
	sleep(r.clock, ctx, d)
}
