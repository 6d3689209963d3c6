package sender

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// send makes the provider call of an attempt through g under deadline and
// decides about its outcome. When g is the primary and failed in a way
// that proves it did not take the mail, the fallback takes it in the same
// attempt (same mark, identical message), if the lease holds a whole send
// more: never after an ambiguous outcome, never for a mail that had one.
func (e *executor) send(hard context.Context, s sessions, j *job, g *gate, st store.Started, deadline, leaseEnd time.Time) verdict {
	ctx, span := e.startSend(hard, &j.mail, g.name, st)
	v := e.sendVia(ctx, s, j, g, st, deadline, leaseEnd)
	endSend(span, &v)
	return v
}

// sendVia makes the provider call of an attempt through g, then, when g
// did not take the mail in a way that proves nothing was sent, through the
// fallback provider (one span, send's, covers both).
func (e *executor) sendVia(hard context.Context, s sessions, j *job, g *gate, st store.Started, deadline, leaseEnd time.Time) verdict {
	rp := e.call(hard, s, g, j, deadline)
	fb := e.failoverTo(g, j, rp)
	v := e.outcome(g, j, st, rp)
	if fb == nil {
		return v
	}
	deadline = e.clock.Now().Add(e.cfg.SendTimeout)
	if deadline.Add(margin(e.cfg)).After(leaseEnd) {
		return v
	}
	if fb.limited() {
		at, serr := fb.slot(hard)
		if serr != nil {
			return v
		}
		sleep(e.clock, hard, e.clock.Until(at))
	}
	if !v.Record.Release {
		e.metrics.Attempts.WithLabelValues(g.name, v.Outcome).Inc() // a 429 is counted as throttled
	}
	e.metrics.Failovers.WithLabelValues(g.name, fb.name).Inc()
	e.log.Warn("failover: the primary provider did not take the mail; sending it through the fallback",
		append(j.logAttrs(), "from", g.name, "to", fb.name, "error", mailtype.Sanitize(rp.err.Error(), e.cfg.Secrets...))...)
	fv := e.outcome(fb, j, st, e.call(hard, s, fb, j, deadline))
	fv.refused = fv.refused || v.refused // the primary refused this worker's session: it still waits to dial
	return fv
}

// failoverTo returns the fallback that takes j after err from g, nil when
// none may: only from the primary, for a mail without an ambiguous
// outcome and not a probe, after a failure that proves nothing was sent
// (mailtype.Reroutable) other than a rate limit, to a fallback that is not
// paused.
func (e *executor) failoverTo(g *gate, j *job, rp reply) *gate {
	fb := e.router.fallback()
	err := rp.err
	if fb == nil || g != e.router.primary() || err == nil || j.probe != nil || j.mail.Ambiguous > 0 ||
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
func (e *executor) call(hard context.Context, s sessions, g *gate, j *job, deadline time.Time) reply {
	sendCtx, cancel := context.WithDeadline(hard, deadline)
	defer cancel()
	start := e.clock.Now()
	ls := s.of(e.router, g)
	r, err := ls.Send(sendCtx, e.message(&j.mail))
	atCap := g.atCap(err)
	ls.settle(err == nil)
	took := e.clock.Since(start)
	e.metrics.Duration.WithLabelValues(g.name).Observe(took.Seconds())
	e.router.observeLatency(g, took, err, hard.Err() != nil)
	if err == nil {
		e.metrics.DeliveryLag.Observe(max(0, time.Since(j.mail.OccurredAt).Seconds()))
	}
	if err != nil && hard.Err() != nil {
		e.log.Warn("send cut by the shutdown timeout", append(j.logAttrs(), "error", err)...)
	}
	return reply{r: r, err: err, atCap: atCap}
}

// message builds the provider message from the stored, rendered row: the
// envelope the row was written with, or for a row written before envelopes
// were stored, the running config's.
func (e *executor) message(m *store.ClaimedMail) *Message {
	msg := &Message{
		ID: m.ID, From: m.From, To: m.ToEmail, ToName: m.ToName, ReplyTo: m.ReplyTo,
		Subject: m.Subject, Text: m.BodyText, HTML: m.BodyHTML,
		MessageID: m.MessageID, DedupeKey: m.DedupeKey, IdempotencyKey: m.IdempotencyKey,
		Date: m.CreatedAt, Attachments: m.Attachments,
	}
	if m.Legacy {
		msg.From, msg.ToName = e.cfg.From, displayName(m.ToName)
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
