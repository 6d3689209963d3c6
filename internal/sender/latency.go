package sender

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// This file is the latency guard (docs/design.md, "The latency guard"): a
// provider that answers, but slowly, must not hold every worker for up to
// sender.send_timeout. Each provider keeps the durations of its recent
// sends; while their p90 is over sender.slow_send_threshold the provider
// is slow: it takes at most Config.SlowSendConcurrency sends at once, and
// at most one of a mail the fallback may take instead (provably unsent:
// no ambiguous outcome), which goes through the fallback. The decision is
// a function of the recorded durations alone, so a test drives it with
// durations, not with a clock.

// minSlowSamples is how many recent sends the guard needs before it judges
// a provider (fewer when the window is smaller).
const minSlowSamples = 5

// slowRecovery is the share of the threshold the p90 must fall under
// before a slow provider is fast again (hysteresis: a p90 hovering at the
// threshold does not flip the route at every send).
const slowRecovery = 0.8

// latency is one provider's latency guard: the durations of its last sends
// (a ring of Config.SlowSendWindow), whether it is slow, and how many sends
// to it are admitted now. Safe for concurrent use.
type latency struct {
	threshold time.Duration // 0: the guard is off
	limit     int           // sends at once while slow

	mu       sync.Mutex
	ring     []time.Duration
	next, n  int
	slow     bool
	inflight int
}

func newLatency(cfg Config) *latency {
	l := &latency{limit: cfg.SlowSendConcurrency, ring: make([]time.Duration, max(1, cfg.SlowSendWindow))}
	if cfg.SlowSendThreshold > 0 {
		l.threshold = cfg.SlowSendThreshold
	}
	return l
}

// record adds the duration d of a send that reached the provider. It
// returns the p90 of the window (0 while it holds fewer than
// minSlowSamples sends, or the whole window when that is smaller),
// whether the provider is slow after d, and whether that changed. With
// the guard off the provider is never slow, but the p90 is still
// reported.
func (l *latency) record(d time.Duration) (p90 time.Duration, slow, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = d
	l.next = (l.next + 1) % len(l.ring)
	l.n = min(l.n+1, len(l.ring))
	if l.n < min(minSlowSamples, len(l.ring)) {
		return 0, l.slow, false
	}
	p90 = percentile90(l.ring[:l.n])
	if l.threshold == 0 {
		return p90, false, false
	}
	was := l.slow
	switch {
	case !l.slow && p90 > l.threshold:
		l.slow = true
	case l.slow && float64(p90) <= slowRecovery*float64(l.threshold):
		l.slow = false
	}
	return p90, l.slow, l.slow != was
}

// percentile90 is the nearest-rank 90th percentile of ds (not empty).
func percentile90(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(0.9*float64(len(s))))-1]
}

// engaged reports whether the provider is slow now.
func (l *latency) engaged() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slow
}

// admit reserves a send: always while the provider is fast, while it is
// slow only when fewer than limit sends are admitted. Every admit that
// returned true is followed by one done.
func (l *latency) admit(limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slow && l.inflight >= limit {
		return false
	}
	l.inflight++
	return true
}

// done ends a send admit reserved.
func (l *latency) done() {
	l.mu.Lock()
	l.inflight--
	l.mu.Unlock()
}

// measured reports whether a provider call says how fast the provider is:
// it reached the provider (not a session it refused or could not open)
// and was not cut by the shutdown.
func measured(err error, cut bool) bool {
	if cut {
		return false
	}
	t, _ := TroubleOf(err)
	return t != TroubleBusy && t != TroubleConfig
}

// observeLatency records the duration d of a call through g and reports
// a change of the guard's verdict (log, mailsvc_provider_slow).
func (r *router) observeLatency(g *gate, d time.Duration, err error, cut bool) {
	if !measured(err, cut) {
		return
	}
	p90, slow, changed := g.lat.record(d)
	r.metrics.SendP90.WithLabelValues(g.name).Set(p90.Seconds())
	if !changed {
		return
	}
	v := 0.0
	if slow {
		v = 1
	}
	r.metrics.Slow.WithLabelValues(g.name).Set(v)
	if !slow {
		g.log.Info("provider fast again: the latency guard lifts its limit", "p90", p90, "threshold", g.lat.threshold)
		return
	}
	g.log.Warn("provider slow: the p90 of its recent sends is over sender.slow_send_threshold; it takes at most "+
		"sender.slow_send_concurrency sends at once, and mails that were provably never sent go through the "+
		"fallback provider where one is configured and not paused", "p90", p90, "threshold", g.lat.threshold,
		"concurrency", g.lat.limit)
}

// guard applies the latency guard to j's route g (router.route) and
// returns the provider j goes to, with the send admitted (j.admitted),
// or nil when none may take it now (the mail goes back to pending
// unspent). A probe is not limited. A slow primary keeps one send of a
// mail the fallback may take (slowFallback) and hands the rest to the
// fallback; a mail no fallback may take waits for one of its provider's
// SlowSendConcurrency sends.
func (r *router) guard(j *job, g *gate) *gate {
	if g == nil || j.probe == g {
		return g
	}
	fb := r.slowFallback(j, g)
	limit := g.lat.limit
	if fb != nil {
		limit = 1
	}
	if g.lat.admit(limit) {
		j.admitted = g
		return g
	}
	if fb == nil || !fb.lat.admit(fb.lat.limit) {
		return nil
	}
	j.admitted = fb
	r.metrics.SlowReroutes.WithLabelValues(g.name, fb.name).Inc()
	return fb
}

// slowFallback returns the fallback that may take j instead of g, nil
// when none may: only from the primary, for a mail with no ambiguous
// outcome (the rule of a failover while the primary is paused, router.route),
// to a fallback that is not paused.
func (r *router) slowFallback(j *job, g *gate) *gate {
	fb := r.fallback()
	if fb == nil || g != r.primary() || j.mail.Ambiguous > 0 || fb.paused() {
		return nil
	}
	return fb
}

// unadmit ends the send guard admitted for j, if any.
func (r *router) unadmit(j *job) {
	if g := j.admitted; g != nil {
		j.admitted = nil
		g.lat.done()
	}
}

// claimCap is the most rows the pool should hold unsent while the latency
// guard limits every route a mail may take now; ok is false when some
// route is not limited. Without it the dispatcher would claim a batch of
// which all but a few rows go back to pending at once, claim after claim.
func (r *router) claimCap() (int, bool) {
	pr, fb := r.primary(), r.fallback()
	if pr.paused() || !pr.lat.engaged() {
		return 0, false
	}
	if fb == nil || fb.paused() {
		return pr.lat.limit, true
	}
	if !fb.lat.engaged() {
		return 0, false
	}
	return 1 + fb.lat.limit, true
}

// guardRoom caps n, the rows the dispatcher is about to claim, at what
// the latency guard lets the pool hold unsent (claimCap). When that is
// none it waits until a row is no longer held, or a poll interval, and
// returns 0.
func (r *router) guardRoom(ctx context.Context, n int, held *holdings) int {
	c, ok := r.claimCap()
	if !ok {
		return n
	}
	free := c - held.unsentNow()
	if free > 0 {
		return min(n, free)
	}
	t := r.clock.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-held.freed:
	case <-t.Chan():
	case <-ctx.Done():
	}
	return 0
}

// guardEngaged reports whether the latency guard limits some provider: a
// mail it kept back is due again after a poll interval.
func (r *router) guardEngaged() bool {
	for _, g := range r.gates {
		if g.lat.engaged() {
			return true
		}
	}
	return false
}
