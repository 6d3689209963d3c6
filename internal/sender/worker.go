package sender

import (
	"context"
	"sync"
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
	// heartbeats push it forward.
	leaseEnd atomic.Int64
	// lost is set when a heartbeat found the lease taken.
	lost atomic.Bool
	// recording is set once the recorder writes the outcome; the heartbeat
	// no longer judges the row then (the write may have finished it).
	recording atomic.Bool

	mu     sync.Mutex
	cancel context.CancelFunc // cuts the send in progress, if any
}

// result is a verdict on its way to the recorder.
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
	return []any{"dedupe_key", j.mail.DedupeKey, "event_id", j.mail.EventID, "attempts", j.mail.Token}
}

func (j *job) setCancel(c context.CancelFunc) {
	j.mu.Lock()
	j.cancel = c
	j.mu.Unlock()
}

// markLost records that the lease is taken and cuts a send in progress:
// its outcome could not be recorded anyway.
func (j *job) markLost() {
	j.lost.Store(true)
	j.mu.Lock()
	if j.cancel != nil {
		j.cancel()
	}
	j.mu.Unlock()
}

// deadline is the last moment the pool may act on the row: the lease end
// minus a margin for the database round trip.
func (j *job) deadline(lease time.Duration) time.Time {
	return time.Unix(0, j.leaseEnd.Load()).Add(-min(lease/10, 5*time.Second))
}

// runWorker sends the queued jobs until the queue closes. ctx is the
// hard-stop context: cancelling it cuts the send in progress and leaves
// the queued rows to their lease.
func (p *Pool) runWorker(ctx context.Context) {
	s := p.deps.Provider.NewSession()
	defer func() { _ = s.Close() }()
	for j := range p.queue {
		v, ok := p.handle(ctx, s, j)
		p.sent()
		if ok {
			p.outcomes <- result{j: j, v: v}
		} else {
			p.disown(j)
		}
	}
}

// handle runs one attempt: send under the hard deadline, classify. It
// returns false when there is nothing to record: a hard stop, a lost
// lease, or a lease that ran out before the row's turn.
func (p *Pool) handle(ctx context.Context, s Session, j *job) (verdict, bool) {
	m := &j.mail
	switch {
	case ctx.Err() != nil:
		p.log.Info("shutdown before the send; left to the lease", j.logAttrs()...)
		return verdict{}, false
	case j.lost.Load():
		return verdict{}, false
	case time.Now().After(j.deadline(p.cfg.Lease)):
		p.log.Warn("lease ran out before the send (database unreachable?); left to the lease", j.logAttrs()...)
		return verdict{}, false
	}
	if m.Reclaimed {
		p.metrics.LeaseReclaims.Inc()
	}
	a := p.attemptOf(m)
	if v, skip := reclaimVerdict(a); m.Reclaimed && skip {
		return v, true
	}
	sendCtx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	j.setCancel(cancel)
	start := time.Now()
	r, err := s.Send(sendCtx, p.message(m))
	p.metrics.Duration.WithLabelValues(a.Provider).Observe(time.Since(start).Seconds())
	j.setCancel(nil)
	cancel()
	if err != nil && ctx.Err() != nil {
		p.log.Info("send cut by shutdown; left to the lease", j.logAttrs()...)
		return verdict{}, false
	}
	if j.lost.Load() {
		p.metrics.Attempts.WithLabelValues(a.Provider, OutcomeFenced).Inc()
		p.log.Warn("lease lost during the send; nothing recorded", j.logAttrs()...)
		return verdict{}, false
	}
	v := decide(err, r, a)
	if d := max(v.Throttle, r.Throttle); d > 0 {
		p.hold(d)
	}
	return v, true
}

// attemptOf gathers the rules that apply to this attempt of m.
func (p *Pool) attemptOf(m *store.ClaimedMail) attempt {
	return attempt{
		Token: m.Token, MaxAttempts: p.cfg.MaxAttempts, Policy: p.policy(m.Template),
		Provider: p.deps.Provider.Name(), Window: p.deps.Provider.IdempotencyWindow(),
		Age:          time.Since(m.FirstAttemptAt),
		RetryBackoff: p.cfg.RetryBackoff, RetryBackoffMax: p.cfg.RetryBackoffMax,
		Secrets: p.cfg.Secrets,
	}
}

// policy is the ambiguous-outcome policy of a template: its own setting
// when it has a valid one, else the pool's.
func (p *Pool) policy(template string) mailtype.AmbiguousPolicy {
	if p.deps.Templates != nil {
		if s, err := p.deps.Templates.Settings(template); err == nil && s.AmbiguousPolicy.Valid() {
			return s.AmbiguousPolicy
		}
	}
	return p.cfg.AmbiguousPolicy
}

// message builds the provider message from the stored, rendered row.
func (p *Pool) message(m *store.ClaimedMail) *Message {
	id := m.MessageID
	if id == "" {
		id = mailtype.MessageID(m.DedupeKey, mailtype.AddressDomain(p.cfg.From))
	}
	return &Message{
		From: p.cfg.From, To: m.ToEmail, ToName: displayName(m.ToName),
		Subject: m.Subject, Text: m.BodyText, HTML: m.BodyHTML,
		MessageID: id, DedupeKey: m.DedupeKey, IdempotencyKey: mailtype.IdempotencyKey(m.DedupeKey),
		Date: m.CreatedAt,
	}
}

// displayName cleans the stored customer name exactly as the templates did
// for the greeting (the row keeps the raw payload value): no control or bidi
// override characters, at most templates.MaxNameRunes runes. A name
// DisplayName refuses (a line break) is dropped rather than failing the
// mail: a mail never fails because of its display name.
func displayName(raw string) string {
	name, err := templates.DisplayName(raw)
	if err != nil {
		return ""
	}
	return name
}
