package sender

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// executor is what the pool's workers share: each worker (runWorker) takes
// queued rows one at a time, has the completer mark each send started
// (with its previous outcome in the same commit), hands the row to its
// provider through the router and judges the outcome; it keeps its own
// provider sessions. Its fields are read-only once the pool started.
type executor struct {
	cfg       Config
	clock     clockwork.Clock
	log       *slog.Logger
	metrics   *Metrics
	rules     rules
	router    *router
	completer *completer
	held      *holdings
	queue     <-chan *job
	tracer    *tracing.Tracer
}

// margin is kept free at the end of every lease for the database round
// trip that records the outcome.
func margin(cfg Config) time.Duration {
	return min(cfg.Lease/10, 5*time.Second)
}

// commit hands out (may be nil) and the mark of j's send (j may be nil)
// to the completer and waits for the commit (completer.commit); out's row
// is disowned once written.
func (e *executor) commit(out *result, j *job) (store.Started, time.Time, bool) {
	st, leaseEnd, ok := e.completer.commit(out, j)
	if out != nil {
		e.held.disown(out.j)
	}
	return st, leaseEnd, ok
}

// runWorker handles the queued jobs until the queue closes. soft ends with
// Stop: queued rows are released, not sent. hard ends after the shutdown
// timeout: it cuts the send in progress. A send's outcome is written in
// the same transaction as the mark of the worker's next send; when no row
// is queued it is written alone at once. So a worker starts a send only
// after its previous outcome committed: at any instant at most one
// accepted, unrecorded mail per worker exists.
func (e *executor) runWorker(soft, hard context.Context) {
	s := newSessions(e.router.gates)
	defer s.close()
	var out *result
	refusals, warned := 0, false
	for {
		j, ok := e.next(out != nil)
		switch {
		case !ok:
			if out != nil {
				e.commit(out, nil)
			}
			return
		case j == nil:
			e.commit(out, nil)
			out = nil
		default:
			out = e.work(soft, hard, s, j, out)
			if out != nil && out.v.refused {
				refusals++
				warned = e.waitToDial(soft, out, refusals, warned)
				out = nil
			} else if out != nil && out.v.Outcome == OutcomeSent {
				refusals, warned = 0, false
			}
		}
	}
}

// maxDialWait is the longest a worker whose session the provider refused
// at its cap waits before it takes another mail (and dials again).
const maxDialWait = 30 * time.Second

// waitToDial writes out, the outcome of a mail whose session the provider
// refused (TroubleBusy: unspent at its cap of sessions, else a transient
// failure), and waits before the worker takes another mail: up to a
// second after the first refusal in a row, doubling up to maxDialWait
// (backoff.Delay: half to all of it). Without the wait, a refused worker,
// free again at once, would take most of the mails and pass each back.
// It warns once per streak of refusals, at the first one at the cap, and
// returns whether it has warned.
func (e *executor) waitToDial(soft context.Context, out *result, refusals int, warned bool) bool {
	e.commit(out, nil)
	d := backoff.Delay(refusals, time.Second, maxDialWait)
	if !warned && out.v.atCap {
		e.log.Warn("the provider refused a new session while others deliver (is sender.workers above its limit of "+
			"connections per client?); the mail goes back unspent and this worker waits before it dials again",
			"dedupe_key", out.j.mail.DedupeKey, "event_id", out.j.mail.EventID, "wait", d, "error", out.v.Record.Error)
		warned = true
	}
	sleep(e.clock, soft, d)
	return warned
}

// next takes the next queued job; with pending set it does not wait (nil
// when none is queued). ok is false when the queue closed.
func (e *executor) next(pending bool) (*job, bool) {
	if !pending {
		j, ok := <-e.queue
		return j, ok
	}
	select {
	case j, ok := <-e.queue:
		return j, ok
	default:
		return nil, true
	}
}

// work takes one row through mark and send, writing out (the previous
// outcome) with the mark, and returns the row's own outcome for the next
// write (nil when there is nothing to record). A row is handed to the
// provider only after its send-started mark committed, with a deadline
// that ends, margin included, inside the lease the mark renewed. A row no
// provider may take now (every route paused, or at its latency guard's
// limit) goes back to pending unspent, due when a pause may end (after a
// poll interval while a guard is engaged); a rate-limited provider's send waits for its
// slot before the mark, so the wait does not widen the window in which a
// crash leaves a started send, except after a mark that committed too
// late for its slot (slotStillFresh), the only wait for a slot after the
// mark besides a failover's.
func (e *executor) work(soft, hard context.Context, s sessions, j *job, out *result) *result {
	defer e.held.sent(j)
	defer e.router.unadmit(j)
	switch {
	case j.lost.Load():
		e.flush(out)
		e.held.disown(j)
		return nil
	case soft.Err() != nil:
		e.flush(out)
		return &result{j: j, v: releaseVerdict()}
	}
	if j.mail.Reclaimed {
		e.metrics.LeaseReclaims.Inc()
	}
	if v, ok := suppressed(&j.mail); ok {
		e.flush(out)
		e.log.Info("mail not sent: its recipient is suppressed", j.logAttrs()...)
		return &result{j: j, v: v}
	}
	if v, stale := e.rules.stale(&j.mail, e.clock.Now(), e.router.primary().resumedAt()); stale {
		e.flush(out)
		e.log.Warn("mail not sent: its event is older than its max age", append(j.logAttrs(), "error", v.Record.Error)...)
		return &result{j: j, v: v}
	}
	g, out := e.pick(soft, j, out)
	switch {
	case g == nil && soft.Err() != nil:
		e.flush(out)
		return &result{j: j, v: releaseVerdict()}
	case g == nil:
		e.flush(out)
		return &result{j: j, v: deferVerdict(e.router.resumeIn())}
	}
	st, leaseEnd, ok := e.commit(out, j)
	if !ok {
		return &result{j: j, v: releaseVerdict()}
	}
	j.started = st
	if !e.slotStillFresh(soft, g, j) {
		return &result{j: j, v: releaseVerdict()}
	}
	deadline := e.clock.Now().Add(e.cfg.SendTimeout)
	if deadline.Add(margin(e.cfg)).After(leaseEnd) {
		e.log.Warn("the lease cannot hold a whole send (the mark was slow); released unsent", j.logAttrs()...)
		return &result{j: j, v: releaseVerdict()}
	}
	return &result{j: j, v: e.send(hard, s, j, g, st, deadline, leaseEnd)}
}

// slotStillFresh makes sure that a rate-limited send starts within g.late
// of its slot, as the slots are paced for: a mark that took longer (a slow
// commit) left the slot stale, and sending at once would bunch with the
// sends of later slots into a burst the provider counts against its limit
// (Resend's 5 requests per second at the API). Then it waits for a new
// slot; false when none may be had (the pool stops, the provider was
// paused meanwhile, the database failed), and the marked row is released
// unsent.
func (e *executor) slotStillFresh(soft context.Context, g *gate, j *job) bool {
	if j.slotAt.IsZero() || j.probe == g || e.clock.Since(j.slotAt) <= g.late {
		return true
	}
	e.metrics.StaleSlots.WithLabelValues(g.name).Inc()
	return e.waitSlot(soft, g, j)
}

// pick routes j (router.route) and, for a rate-limited provider, waits for
// its send slot, after writing out alone (the wait must not hold the
// previous outcome back). It returns the provider, nil when none may take
// j now, and the outcome still to write with the mark.
func (e *executor) pick(soft context.Context, j *job, out *result) (*gate, *result) {
	g := e.router.guard(j, e.router.route(j))
	if g == nil || !g.limited() {
		return g, out
	}
	e.flush(out)
	if !e.waitSlot(soft, g, j) {
		return nil, nil
	}
	return g, nil
}

// waitSlot waits for the send slot of j through g (the deployment-wide
// rate limit). false when the send must not start now: the pool stops,
// the provider was paused meanwhile, or the database did not hand out a
// slot.
func (e *executor) waitSlot(soft context.Context, g *gate, j *job) bool {
	var at time.Time
	var err error
	if j.probe == g {
		at, err = g.probeSlot(soft)
	} else {
		at, err = g.slot(soft)
	}
	if err != nil {
		if !errors.Is(err, errPaused) && soft.Err() == nil {
			e.log.Warn("take a send slot (rate limit)", append(j.logAttrs(), "error", err)...)
		}
		return false
	}
	if d := e.clock.Until(at); d > 0 {
		sleep(e.clock, soft, d)
	}
	j.slotAt = at
	return soft.Err() == nil && (j.probe == g || !g.paused())
}

// flush writes out alone, if any.
func (e *executor) flush(out *result) {
	if out != nil {
		e.commit(out, nil)
	}
}
