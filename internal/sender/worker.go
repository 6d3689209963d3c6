package sender

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// job is one claimed row on its way through a worker.
type job struct {
	mail store.ClaimedMail
	// leaseEnd (unix nanoseconds, local clock) is when the lease ends;
	// heartbeats push it forward.
	leaseEnd atomic.Int64
	// lost is set when a heartbeat found the lease taken.
	lost atomic.Bool
}

func newJob(m store.ClaimedMail, leaseEnd time.Time) *job {
	j := &job{mail: m}
	j.leaseEnd.Store(leaseEnd.UnixNano())
	return j
}

func (j *job) logAttrs() []any {
	return []any{"dedupe_key", j.mail.DedupeKey, "event_id", j.mail.EventID, "attempts", j.mail.Token}
}

// runWorker sends the jobs the dispatcher hands over until jobs closes.
// ctx is the hard-stop context: cancelling it cuts in-flight sends.
func (p *Pool) runWorker(ctx context.Context) {
	s := p.deps.Provider.NewSession()
	defer func() { _ = s.Close() }()
	for j := range p.jobs {
		p.handle(ctx, s, j)
		p.idle <- struct{}{}
	}
}

// handle runs one attempt: send under the hard deadline while a heartbeat
// keeps the lease, classify, record.
func (p *Pool) handle(ctx context.Context, s Session, j *job) {
	m := &j.mail
	if m.Reclaimed {
		p.metrics.LeaseReclaims.Inc()
	}
	a := p.attemptOf(m)
	if v, skip := reclaimVerdict(a); m.Reclaimed && skip {
		p.record(ctx, j, v)
		return
	}
	sendCtx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	stopBeat := p.heartbeat(ctx, j, cancel)
	start := time.Now()
	r, err := s.Send(sendCtx, p.message(m))
	p.metrics.Duration.WithLabelValues(a.Provider).Observe(time.Since(start).Seconds())
	stopBeat()
	cancel()
	if err != nil && ctx.Err() != nil {
		p.log.Info("send cut by shutdown; left to the lease", j.logAttrs()...)
		return
	}
	if err != nil && j.lost.Load() {
		p.fenced(a.Provider, j)
		return
	}
	v := decide(err, r, a)
	if d := max(v.Throttle, r.Throttle); d > 0 {
		p.hold(d)
	}
	p.record(ctx, j, v)
}

// attemptOf gathers the rules that apply to this attempt of m.
func (p *Pool) attemptOf(m *store.ClaimedMail) attempt {
	return attempt{
		Token: m.Token, MaxAttempts: p.cfg.MaxAttempts, Policy: p.policy(m.Template),
		Provider: p.deps.Provider.Name(), Window: p.deps.Provider.IdempotencyWindow(),
		Age:          time.Since(m.FirstAttemptAt),
		RetryBackoff: p.cfg.RetryBackoff, RetryBackoffMax: p.cfg.RetryBackoffMax,
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
		From: p.cfg.From, To: m.ToEmail, ToName: m.ToName,
		Subject: m.Subject, Text: m.BodyText, HTML: m.BodyHTML,
		MessageID: id, DedupeKey: m.DedupeKey, IdempotencyKey: mailtype.IdempotencyKey(m.DedupeKey),
		Date: m.CreatedAt,
	}
}

// heartbeat renews j's lease every third of the lease while the send runs,
// so a slow but alive worker is not overtaken. When a renewal finds the
// lease taken it marks j lost and cancels the send (its outcome could not
// be recorded anyway). The returned func stops the heartbeat and waits for
// it.
func (p *Pool) heartbeat(ctx context.Context, j *job, cancelSend context.CancelFunc) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !p.renew(ctx, j) {
				cancelSend()
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// renew extends j's lease once; false when the lease is lost.
func (p *Pool) renew(ctx context.Context, j *job) bool {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, p.cfg.DBTimeout)
	defer cancel()
	err := p.deps.Store.RenewLease(rctx, j.mail.Fence, p.cfg.Lease)
	switch {
	case err == nil:
		j.leaseEnd.Store(start.Add(p.cfg.Lease).UnixNano())
	case errors.Is(err, store.ErrLeaseLost):
		j.lost.Store(true)
		return false
	default:
		p.log.Warn("renew lease", append(j.logAttrs(), "error", err)...)
	}
	return true
}

// record writes the verdict with the fenced write. A passing database
// error does not lose it: the write is retried with backoff until it
// succeeds, the lease is about to run out (after which another worker may
// own the row), or a hard stop. A fenced write records nothing else.
func (p *Pool) record(ctx context.Context, j *job, v verdict) {
	provider := p.deps.Provider.Name()
	margin := min(p.cfg.Lease/10, 5*time.Second)
	deadline := time.Unix(0, j.leaseEnd.Load()).Add(-margin)
	for try := 1; ; try++ {
		timeout := p.cfg.DBTimeout
		if try > 1 {
			timeout = min(timeout, time.Until(deadline))
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		fin, err := p.deps.Store.FinishAttempt(wctx, j.mail.Fence, v.Record)
		cancel()
		if err == nil {
			p.metrics.Attempts.WithLabelValues(provider, v.Outcome).Inc()
			p.logFinished(j, v, fin)
			return
		}
		if errors.Is(err, store.ErrLeaseLost) {
			p.fenced(provider, j)
			return
		}
		delay := backoff.Delay(try, 20*time.Millisecond, time.Second)
		if ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			p.metrics.Attempts.WithLabelValues(provider, v.Outcome).Inc()
			p.log.Error("outcome not recorded; the row is left to its lease",
				append(j.logAttrs(), "status", v.Record.Status, "tries", try, "error", err)...)
			return
		}
		sleep(ctx, delay)
	}
}

// fenced counts and logs a write refused because the lease was lost.
func (p *Pool) fenced(provider string, j *job) {
	p.metrics.Attempts.WithLabelValues(provider, OutcomeFenced).Inc()
	p.metrics.FencingRejections.Inc()
	p.log.Warn("lease lost: another worker owns the mail; nothing recorded", j.logAttrs()...)
}

func (p *Pool) logFinished(j *job, v verdict, fin store.Finished) {
	attrs := append(j.logAttrs(), "status", fin.Status)
	if v.Record.ProviderMessageID != "" {
		attrs = append(attrs, "provider_message_id", v.Record.ProviderMessageID)
	}
	if fin.Event != "" && p.deps.OnOutboxWritten != nil {
		p.deps.OnOutboxWritten()
	}
	switch fin.Status {
	case mailtype.StatusSent:
		p.log.Debug("mail sent", attrs...)
	case mailtype.StatusPending:
		p.log.Info("send failed; will retry", append(attrs, "error_reason", v.Record.ErrorReason,
			"error", v.Record.Error, "retry_after", v.Record.RetryAfter)...)
	default:
		lvl := slog.LevelWarn
		if v.Record.ErrorReason == mailtype.ReasonIdempotencyReuse {
			lvl = slog.LevelError // payload changed between attempts: a bug, alert
		}
		p.log.Log(context.Background(), lvl, "mail finished without delivery", append(attrs,
			"error_class", v.Record.ErrorClass, "error_reason", v.Record.ErrorReason, "error", v.Record.Error)...)
	}
}
