package sender

import (
	"context"
	"sync/atomic"
	"time"

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
	s := p.deps.Provider.NewSession()
	defer func() { _ = s.Close() }()
	var out *result
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
		}
	}
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
// that ends, margin included, inside the lease the mark renewed.
func (p *Pool) work(soft, hard context.Context, s Session, j *job, out *result) *result {
	defer p.sent(j)
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
	if v, stale := p.rules.stale(&j.mail, time.Now()); stale {
		p.flush(out)
		p.log.Warn("mail not sent: its event is older than its max age", append(j.logAttrs(), "error", v.Record.Error)...)
		return &result{j: j, v: v}
	}
	st, leaseEnd, ok := p.commit(out, j)
	if !ok {
		return &result{j: j, v: releaseVerdict()}
	}
	deadline := time.Now().Add(p.cfg.SendTimeout)
	if deadline.Add(p.margin()).After(leaseEnd) {
		p.log.Warn("the lease cannot hold a whole send (the mark was slow); released unsent", j.logAttrs()...)
		return &result{j: j, v: releaseVerdict()}
	}
	return &result{j: j, v: p.send(hard, s, j, st, deadline)}
}

// flush writes out alone, if any.
func (p *Pool) flush(out *result) {
	if out != nil {
		p.commit(out, nil)
	}
}

// send makes the one provider call of an attempt under deadline and
// decides about its outcome.
func (p *Pool) send(hard context.Context, s Session, j *job, st store.Started, deadline time.Time) verdict {
	m := &j.mail
	a := p.attemptOf(m, st)
	sendCtx, cancel := context.WithDeadline(hard, deadline)
	defer cancel()
	sendCtx, span := p.startSend(sendCtx, m, a.Provider, st)
	start := time.Now()
	r, err := s.Send(sendCtx, p.message(m))
	p.metrics.Duration.WithLabelValues(a.Provider).Observe(time.Since(start).Seconds())
	if err == nil {
		p.metrics.DeliveryLag.Observe(max(0, time.Since(m.OccurredAt).Seconds()))
	}
	if err != nil && hard.Err() != nil {
		p.log.Warn("send cut by the shutdown timeout", append(j.logAttrs(), "error", err)...)
	}
	v := decide(err, r, a)
	endSend(span, &v)
	if d := max(v.Throttle, r.Throttle); d > 0 {
		p.hold(d)
	}
	return v
}

// attemptOf gathers the rules that apply to this attempt of m.
func (p *Pool) attemptOf(m *store.ClaimedMail, st store.Started) attempt {
	return p.rules.attempt(m.Template, st.Sends, st.Ambiguous, time.Since(m.FirstAttemptAt))
}

// message builds the provider message from the stored, rendered row: the
// envelope the row was written with, or for a row written before envelopes
// were stored, the running config's.
func (p *Pool) message(m *store.ClaimedMail) *Message {
	msg := &Message{
		From: m.From, To: m.ToEmail, ToName: m.ToName, ReplyTo: m.ReplyTo,
		Subject: m.Subject, Text: m.BodyText, HTML: m.BodyHTML,
		MessageID: m.MessageID, DedupeKey: m.DedupeKey, IdempotencyKey: m.IdempotencyKey,
		Date: m.CreatedAt,
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
