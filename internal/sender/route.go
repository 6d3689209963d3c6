package sender

import (
	"context"
	"time"
)

// This file is where the pool meets the providers' shared state (gate.go):
// which provider a mail goes to, when the dispatcher claims nothing
// because every route is paused, the probes of a paused provider, and the
// refresh of what other replicas learned.

// primary is the provider of sender.provider.
func (p *Pool) primary() *gate { return p.gates[0] }

// fallback is the provider of sender.fallback_provider, nil without one.
func (p *Pool) fallback() *gate {
	if len(p.gates) > 1 {
		return p.gates[1]
	}
	return nil
}

// gateNamed returns the gate of the provider called name, nil for none.
func (p *Pool) gateNamed(name string) *gate {
	for _, g := range p.gates {
		if g.name == name {
			return g
		}
	}
	return nil
}

// refreshGates reads every provider's shared state once (best effort;
// a failure keeps the last view). While the database fails it logs the
// first failure and every 30th.
func (p *Pool) refreshGates() {
	for _, g := range p.gates {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DBTimeout)
		err := g.refresh(ctx)
		cancel()
		switch n := p.stateFailures.Load(); {
		case err != nil:
			if n = p.stateFailures.Add(1); n == 1 || n%30 == 0 {
				g.log.Warn("read the provider's shared state (pauses, breaker): the last one read stays in force",
					"failures", n, "error", err)
			}
		case n > 0:
			p.stateFailures.Store(0)
			p.log.Info("the providers' shared state is readable again", "failures", n)
		}
	}
}

// stateLoop reads what the other replicas learned about the providers
// (pauses, the breaker) at once, closing read after that first attempt,
// then every poll interval until every outcome was recorded: one round
// trip per provider per interval, none per mail.
func (p *Pool) stateLoop(read chan<- struct{}) {
	p.refreshGates()
	close(read)
	t := time.NewTicker(p.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.recorded:
			return
		case <-t.C:
			p.refreshGates()
		}
	}
}

// route picks the provider of a job's send, nil when none may take it now.
// A probe goes to the paused provider it probes. A mail with an ambiguous
// outcome is only sent again through the provider of that outcome: another
// one could deliver it a second time. Otherwise the primary, unless it is
// paused; then the fallback, when the primary's pause is one it covers (a
// quota, an open breaker; not a rate limit, which passes in seconds).
func (p *Pool) route(j *job) *gate {
	m := &j.mail
	if j.probe != nil && (m.Ambiguous == 0 || m.Provider == j.probe.name) {
		return j.probe
	}
	j.probe = nil
	if m.Ambiguous > 0 {
		g := p.gateNamed(m.Provider)
		if g == nil {
			g = p.primary()
		}
		if g.paused() {
			return nil
		}
		return g
	}
	if !p.primary().paused() {
		return p.primary()
	}
	if fb := p.fallback(); fb != nil && p.primary().failsOver() && !fb.paused() {
		return fb
	}
	return nil
}

// routable reports whether some mail can be sent now: the primary is not
// paused, or the fallback covers its pause.
func (p *Pool) routable() bool {
	if !p.primary().paused() {
		return true
	}
	fb := p.fallback()
	return fb != nil && p.primary().failsOver() && !fb.paused()
}

// takeProbe takes the probe of a paused provider whose probe time came,
// for one worker of the deployment; nil when there is none to take.
func (p *Pool) takeProbe() *gate {
	for _, g := range p.gates {
		if g.takeProbe(p.cfg.WorkerID) {
			return g
		}
	}
	return nil
}

// resumeIn is how long until a paused route may take mails again (the
// earliest pause end or probe among the gates), within [PollInterval, a
// minute]: what a mail that found no route waits before its next claim.
func (p *Pool) resumeIn() time.Duration {
	d, paused := time.Minute, false
	now := time.Now()
	for _, g := range p.gates {
		if ok, _, until := g.pausedUntil(); ok {
			d, paused = min(d, until.Sub(now)), true
		}
	}
	if !paused || p.guardEngaged() {
		// The pause that kept the mail back ended meanwhile (a rate
		// limit's, at its time), or the latency guard did: due at once,
		// not a minute later.
		d = p.cfg.PollInterval
	}
	return max(d, p.cfg.PollInterval)
}

// waitPaused waits, while no route is open, until the earliest pause end
// or probe time, at most a poll interval (the next refresh may end it).
func (p *Pool) waitPaused(ctx context.Context) {
	d := p.cfg.PollInterval
	now := time.Now()
	for _, g := range p.gates {
		if paused, _, until := g.pausedUntil(); paused {
			d = min(d, max(until.Sub(now), time.Millisecond))
		}
	}
	sleep(ctx, d)
}
