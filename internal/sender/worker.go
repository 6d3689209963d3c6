package sender

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// job is one claimed row on its way through the pool.
type job struct {
	mail store.ClaimedMail
	// leaseEnd (unix nanoseconds, local clock) is when the lease ends;
	// heartbeats and the send-started mark push it forward.
	leaseEnd atomic.Int64
	// lost is set when a heartbeat found the lease taken before the send
	// started; the worker then skips the row.
	lost atomic.Bool
	// recording is set once the writer writes the outcome; the heartbeat
	// no longer judges the row then (the write may have finished it).
	recording atomic.Bool
	// sent is set once the row is no longer queued or being sent.
	sent atomic.Bool
	// probe, when set, is the paused provider this mail probes: it is sent
	// through it despite the pause, and its outcome ends or extends the
	// pause.
	probe *gate
	// slotAt is when the send slot of the rate-limited provider the row
	// goes to may be used (waitSlot); zero without a rate limit.
	slotAt time.Time
	// admitted is the provider whose latency guard admitted the row's send
	// (Pool.guard); work ends the admission.
	admitted *gate
}

// result is a verdict on its way to the writer.
type result struct {
	j *job
	v verdict
}

func newJob(m store.ClaimedMail, leaseEnd time.Time) *job {
	j := &job{mail: m}
	j.leaseEnd.Store(leaseEnd.UnixNano())
	return j
}

func (j *job) logAttrs() []any {
	return []any{"dedupe_key", j.mail.DedupeKey, "event_id", j.mail.EventID, "attempts", j.mail.Sends + 1}
}

// margin is kept free at the end of every lease for the database round
// trip that records the outcome.
func (p *Pool) margin() time.Duration {
	return min(p.cfg.Lease/10, 5*time.Second)
}

// runWorker handles the queued jobs until the queue closes. soft ends with
// Stop: queued rows are released, not sent. hard ends after the shutdown
// timeout: it cuts the send in progress. A send's outcome is written in
// the same transaction as the mark of the worker's next send; when no row
// is queued it is written alone at once. So a worker starts a send only
// after its previous outcome committed: at any instant at most one
// accepted, unrecorded mail per worker exists.
func (p *Pool) runWorker(soft, hard context.Context) {
	s := newSessions(p.gates)
	defer s.close()
	var out *result
	refusals, warned := 0, false
	for {
		j, ok := p.next(out != nil)
		switch {
		case !ok:
			if out != nil {
				p.commit(out, nil)
			}
			return
		case j == nil:
			p.commit(out, nil)
			out = nil
		default:
			out = p.work(soft, hard, s, j, out)
			if out != nil && out.v.refused {
				refusals++
				warned = p.waitToDial(soft, out, refusals, warned)
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
func (p *Pool) waitToDial(soft context.Context, out *result, refusals int, warned bool) bool {
	p.commit(out, nil)
	d := backoff.Delay(refusals, time.Second, maxDialWait)
	if !warned && out.v.atCap {
		p.log.Warn("the provider refused a new session while others deliver (is sender.workers above its limit of "+
			"connections per client?); the mail goes back unspent and this worker waits before it dials again",
			"dedupe_key", out.j.mail.DedupeKey, "event_id", out.j.mail.EventID, "wait", d, "error", out.v.Record.Error)
		warned = true
	}
	sleep(soft, d)
	return warned
}

// next takes the next queued job; with pending set it does not wait (nil
// when none is queued). ok is false when the queue closed.
func (p *Pool) next(pending bool) (*job, bool) {
	if !pending {
		j, ok := <-p.queue
		return j, ok
	}
	select {
	case j, ok := <-p.queue:
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
func (p *Pool) work(soft, hard context.Context, s sessions, j *job, out *result) *result {
	defer p.sent(j)
	defer p.unadmit(j)
	switch {
	case j.lost.Load():
		p.flush(out)
		p.disown(j)
		return nil
	case soft.Err() != nil:
		p.flush(out)
		return &result{j: j, v: releaseVerdict()}
	}
	if j.mail.Reclaimed {
		p.metrics.LeaseReclaims.Inc()
	}
	if v, ok := suppressed(&j.mail); ok {
		p.flush(out)
		p.log.Info("mail not sent: its recipient is suppressed", j.logAttrs()...)
		return &result{j: j, v: v}
	}
	if v, stale := p.rules.stale(&j.mail, time.Now(), p.primary().resumedAt()); stale {
		p.flush(out)
		p.log.Warn("mail not sent: its event is older than its max age", append(j.logAttrs(), "error", v.Record.Error)...)
		return &result{j: j, v: v}
	}
	g, out := p.pick(soft, j, out)
	switch {
	case g == nil && soft.Err() != nil:
		p.flush(out)
		return &result{j: j, v: releaseVerdict()}
	case g == nil:
		p.flush(out)
		return &result{j: j, v: deferVerdict(p.resumeIn())}
	}
	st, leaseEnd, ok := p.commit(out, j)
	if !ok {
		return &result{j: j, v: releaseVerdict()}
	}
	if !p.slotStillFresh(soft, g, j) {
		return &result{j: j, v: releaseVerdict()}
	}
	deadline := time.Now().Add(p.cfg.SendTimeout)
	if deadline.Add(p.margin()).After(leaseEnd) {
		p.log.Warn("the lease cannot hold a whole send (the mark was slow); released unsent", j.logAttrs()...)
		return &result{j: j, v: releaseVerdict()}
	}
	return &result{j: j, v: p.send(hard, s, j, g, st, deadline, leaseEnd)}
}

// slotStillFresh makes sure that a rate-limited send starts within g.late
// of its slot, as the slots are paced for: a mark that took longer (a slow
// commit) left the slot stale, and sending at once would bunch with the
// sends of later slots into a burst the provider counts against its limit
// (Resend's 5 requests per second at the API). Then it waits for a new
// slot; false when none may be had (the pool stops, the provider was
// paused meanwhile, the database failed), and the marked row is released
// unsent.
func (p *Pool) slotStillFresh(soft context.Context, g *gate, j *job) bool {
	if j.slotAt.IsZero() || j.probe == g || time.Since(j.slotAt) <= g.late {
		return true
	}
	p.metrics.StaleSlots.WithLabelValues(g.name).Inc()
	return p.waitSlot(soft, g, j)
}

// pick routes j (Pool.route) and, for a rate-limited provider, waits for
// its send slot, after writing out alone (the wait must not hold the
// previous outcome back). It returns the provider, nil when none may take
// j now, and the outcome still to write with the mark.
func (p *Pool) pick(soft context.Context, j *job, out *result) (*gate, *result) {
	g := p.guard(j, p.route(j))
	if g == nil || !g.limited() {
		return g, out
	}
	p.flush(out)
	if !p.waitSlot(soft, g, j) {
		return nil, nil
	}
	return g, nil
}

// waitSlot waits for the send slot of j through g (the deployment-wide
// rate limit). false when the send must not start now: the pool stops,
// the provider was paused meanwhile, or the database did not hand out a
// slot.
func (p *Pool) waitSlot(soft context.Context, g *gate, j *job) bool {
	var at time.Time
	var err error
	if j.probe == g {
		at, err = g.probeSlot(soft)
	} else {
		at, err = g.slot(soft)
	}
	if err != nil {
		if err != errPaused && soft.Err() == nil {
			p.log.Warn("take a send slot (rate limit)", append(j.logAttrs(), "error", err)...)
		}
		return false
	}
	if d := time.Until(at); d > 0 {
		sleep(soft, d)
	}
	j.slotAt = at
	return soft.Err() == nil && (j.probe == g || !g.paused())
}

// flush writes out alone, if any.
func (p *Pool) flush(out *result) {
	if out != nil {
		p.commit(out, nil)
	}
}

// send makes the provider call of an attempt through g under deadline and
// decides about its outcome. When g is the primary and failed in a way
// that proves it did not take the mail, the fallback takes it in the same
// attempt (same mark, identical message), if the lease holds a whole send
// more: never after an ambiguous outcome, never for a mail that had one.
func (p *Pool) send(hard context.Context, s sessions, j *job, g *gate, st store.Started, deadline, leaseEnd time.Time) verdict {
	ctx, span := p.startSend(hard, &j.mail, g.name, st)
	v := p.sendVia(ctx, s, j, g, st, deadline, leaseEnd)
	endSend(span, &v)
	return v
}

// sendVia makes the provider call of an attempt through g, then, when g
// did not take the mail in a way that proves nothing was sent, through the
// fallback provider (one span, send's, covers both).
func (p *Pool) sendVia(hard context.Context, s sessions, j *job, g *gate, st store.Started, deadline, leaseEnd time.Time) verdict {
	rp := p.call(hard, s, g, j, deadline)
	fb := p.failoverTo(g, j, rp)
	v := p.outcome(g, j, st, rp)
	if fb == nil {
		return v
	}
	deadline = time.Now().Add(p.cfg.SendTimeout)
	if deadline.Add(p.margin()).After(leaseEnd) {
		return v
	}
	if fb.limited() {
		at, serr := fb.slot(hard)
		if serr != nil {
			return v
		}
		sleep(hard, time.Until(at))
	}
	if !v.Record.Release {
		p.metrics.Attempts.WithLabelValues(g.name, v.Outcome).Inc() // a 429 is counted as throttled
	}
	p.metrics.Failovers.WithLabelValues(g.name, fb.name).Inc()
	p.log.Warn("failover: the primary provider did not take the mail; sending it through the fallback",
		append(j.logAttrs(), "from", g.name, "to", fb.name, "error", mailtype.Sanitize(rp.err.Error(), p.cfg.Secrets...))...)
	fv := p.outcome(fb, j, st, p.call(hard, s, fb, j, deadline))
	fv.refused = fv.refused || v.refused // the primary refused this worker's session: it still waits to dial
	return fv
}

// failoverTo returns the fallback that takes j after err from g, nil when
// none may: only from the primary, for a mail without an ambiguous
// outcome and not a probe, after a failure that proves nothing was sent
// (mailtype.Reroutable) other than a rate limit, to a fallback that is not
// paused.
func (p *Pool) failoverTo(g *gate, j *job, rp reply) *gate {
	fb := p.fallback()
	err := rp.err
	if fb == nil || g != p.primary() || err == nil || j.probe != nil || j.mail.Ambiguous > 0 ||
		!mailtype.Reroutable(err) || fb.paused() {
		return nil
	}
	if t, _ := TroubleOf(err); t == TroubleRateLimited || rp.atCap {
		return nil // the provider works: the mail waits for it, unspent
	}
	return fb
}

// reply is what one provider call returned. atCap is set when the
// provider refused the session (TroubleBusy) while a session of the pool
// was live before the call, this worker's own included: a relay may still
// count the connection a redial replaces, so the worker's own live session
// refused at its redial is the cap too, once (the failure ends its
// liveness).
type reply struct {
	r     Receipt
	err   error
	atCap bool
}

// call makes one provider call through g.
func (p *Pool) call(hard context.Context, s sessions, g *gate, j *job, deadline time.Time) reply {
	sendCtx, cancel := context.WithDeadline(hard, deadline)
	defer cancel()
	start := time.Now()
	ls := s.of(p, g)
	r, err := ls.Send(sendCtx, p.message(&j.mail))
	atCap := g.atCap(err)
	ls.settle(err == nil)
	took := time.Since(start)
	p.metrics.Duration.WithLabelValues(g.name).Observe(took.Seconds())
	p.observeLatency(g, took, err, hard.Err() != nil)
	if err == nil {
		p.metrics.DeliveryLag.Observe(max(0, time.Since(j.mail.OccurredAt).Seconds()))
	}
	if err != nil && hard.Err() != nil {
		p.log.Warn("send cut by the shutdown timeout", append(j.logAttrs(), "error", err)...)
	}
	return reply{r: r, err: err, atCap: atCap}
}

// outcome applies what a call through g says about the provider to its
// shared state (a rate limit or quota pauses it, a configuration failure
// or an outage counts towards the breaker, a success past the
// configuration checks resets it, a probe's verdict ends or keeps the
// pause) and decides about the mail. A probe that met its provider's
// trouble again spends nothing; neither does a send that met the
// provider's own failure (outageVerdict).
func (p *Pool) outcome(g *gate, j *job, st store.Started, rp reply) verdict {
	m, err, atCap := &j.mail, rp.err, rp.atCap
	a := g.rules.attempt(m.Template, st.Sends, st.Ambiguous, time.Since(m.FirstAttemptAt))
	a.Claims = m.Token
	trouble, after := TroubleOf(err)
	run := 0
	switch {
	case err == nil || provesConfig(err):
		g.recovered(j.probe == g)
	case trouble == TroubleBusy:
		p.metrics.SessionsRefused.WithLabelValues(g.name, strconv.FormatBool(atCap)).Inc()
	case trouble == TroubleRateLimited:
		p.metrics.Throttled.WithLabelValues(g.name).Inc()
		g.pause(mailtype.PauseRateLimited, max(after, time.Second), mailtype.Sanitize(err.Error(), p.cfg.Secrets...))
	case trouble == TroubleQuota:
		p.metrics.Throttled.WithLabelValues(g.name).Inc()
		g.pause(mailtype.PauseQuota, p.cfg.QuotaProbe, mailtype.Sanitize(err.Error(), p.cfg.Secrets...))
	case (trouble == TroubleConfig || trouble == TroubleOutage) && j.probe == g:
		p.log.Warn("probe failed: the provider stays paused", append(j.logAttrs(), "error", mailtype.Sanitize(err.Error(), p.cfg.Secrets...))...)
	case trouble == TroubleConfig || trouble == TroubleOutage:
		run = g.failure(trouble, mailtype.Sanitize(err.Error(), p.cfg.Secrets...))
	}
	v := decide(err, rp.r, a)
	// A send that may have delivered the mail is only sent again under
	// the ambiguous rules (decide), never as the provider's trouble.
	unsent := a.resendIsSafe() || (mailtype.ClassOf(err) != mailtype.Ambiguous && !a.keyExpired())
	switch {
	case j.probe == g && trouble != "" && trouble != TroubleInProgress && unsent:
		v = p.outageVerdict(g, err, a)
	case atCap:
		v = unspentVerdict(err, a, time.Second)
		v.atCap = true
	case providerWide(trouble, run, g) && unsent:
		v = p.outageVerdict(g, err, a)
	}
	if v.Outcome == OutcomeUnanswered {
		p.metrics.Unspent.WithLabelValues(g.name, string(trouble)).Inc()
	}
	v.refused = trouble == TroubleBusy
	if g != p.primary() && !v.Record.Release {
		v.Record.FailoverFrom = p.primary().name
	}
	return v
}

// providerWide reports whether a send's trouble is the provider's, not the
// mail's: a configuration failure always; an outage when it is not the
// only failure in a row (run, the consecutive failures across replicas
// this one made; 0 when it was not counted) or the provider is paused.
func providerWide(trouble Trouble, run int, g *gate) bool {
	switch trouble {
	case TroubleConfig:
		return true
	case TroubleOutage:
		return run >= 2 || g.paused()
	}
	return false
}

// outageVerdict sends the mail back to pending unspent after a send that
// met its provider's own failure (unansweredVerdict): due at the paused
// provider's next probe, else after the mail's backoff.
func (p *Pool) outageVerdict(g *gate, err error, a attempt) verdict {
	retry := backoff.Delay(a.Claims, a.RetryBackoff, a.RetryBackoffMax)
	if paused, _, until := g.pausedUntil(); paused {
		retry = max(time.Until(until), p.cfg.PollInterval)
	}
	return unansweredVerdict(err, a, retry)
}

// provesConfig reports whether a failed send got past every configuration
// check of its provider (connection, TLS, authentication, API key): the
// provider answered about the mail itself, or may have taken it. A failure
// that is the provider's own trouble (an outage included: no answer, even
// after the request was written) proves nothing.
func provesConfig(err error) bool {
	if t, _ := TroubleOf(err); t != "" {
		return false
	}
	switch mailtype.ReasonOf(err) {
	case mailtype.ReasonDeferred, mailtype.ReasonRejected, mailtype.ReasonInvalidAddress, mailtype.ReasonServerError:
		return true
	}
	return mailtype.ClassOf(err) == mailtype.Ambiguous
}

// sessions are a worker's sessions, one per gate of the pool.
type sessions []*liveSession

// liveSession is a worker's session of one provider and whether its last
// send succeeded, which it counts in its gate's live while so (a failed
// send replaces an SMTP connection, so a failure ends the count).
type liveSession struct {
	Session
	g    *gate
	live bool
}

// settle records whether the session's last send succeeded.
func (l *liveSession) settle(ok bool) {
	switch {
	case ok && !l.live:
		l.g.live.Add(1)
	case !ok && l.live:
		l.g.live.Add(-1)
	}
	l.live = ok
}

func newSessions(gates []*gate) sessions {
	s := make(sessions, len(gates))
	for i, g := range gates {
		s[i] = &liveSession{Session: g.prov.NewSession(), g: g}
	}
	return s
}

func (s sessions) of(p *Pool, g *gate) *liveSession {
	for i, pg := range p.gates {
		if pg == g {
			return s[i]
		}
	}
	return s[0]
}

func (s sessions) close() {
	for _, x := range s {
		x.settle(false)
		_ = x.Close()
	}
}

// message builds the provider message from the stored, rendered row: the
// envelope the row was written with, or for a row written before envelopes
// were stored, the running config's.
func (p *Pool) message(m *store.ClaimedMail) *Message {
	msg := &Message{
		ID: m.ID, From: m.From, To: m.ToEmail, ToName: m.ToName, ReplyTo: m.ReplyTo,
		Subject: m.Subject, Text: m.BodyText, HTML: m.BodyHTML,
		MessageID: m.MessageID, DedupeKey: m.DedupeKey, IdempotencyKey: m.IdempotencyKey,
		Date: m.CreatedAt, Attachments: m.Attachments,
	}
	if m.Legacy {
		msg.From, msg.ToName = p.cfg.From, displayName(m.ToName)
		msg.IdempotencyKey = mailtype.IdempotencyKey("", m.DedupeKey)
	}
	if msg.MessageID == "" {
		msg.MessageID = mailtype.MessageID(m.DedupeKey, mailtype.AddressDomain(msg.From))
	}
	if msg.IdempotencyKey == "" {
		msg.IdempotencyKey = mailtype.IdempotencyKey("", m.DedupeKey)
	}
	return msg
}

// displayName cleans a raw customer name exactly as the templates did
// for the greeting: no control or bidi override characters, at most
// templates.MaxNameRunes runes. A name DisplayName refuses (a line break)
// is dropped rather than failing the mail: a mail never fails because of
// its display name.
func displayName(raw string) string {
	name, err := templates.DisplayName(raw)
	if err != nil {
		return ""
	}
	return name
}
