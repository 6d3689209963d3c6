package sender

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// maxRecordBatch bounds the outcomes one transaction writes.
const maxRecordBatch = 128

// recordLoop writes the workers' verdicts until outcomes closes: every
// verdict waiting when a write starts goes into the same transaction, so
// under load one commit (one WAL flush, two statements) serves many mails,
// while a lone verdict is written at once. One recorder: measured on two
// cores, more recorders made smaller batches and no more throughput.
func (p *Pool) recordLoop(ctx context.Context) {
	batch := make([]result, 0, maxRecordBatch)
	for r := range p.outcomes {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxRecordBatch {
			select {
			case r, ok := <-p.outcomes:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		p.writeBatch(ctx, batch)
	}
}

// writeBatch records a batch of verdicts. A passing database error does
// not lose them: the write is retried with backoff, each verdict until its
// lease is about to run out (after which another worker may own the row)
// or a hard stop; a verdict dropped so is logged and left to the lease.
// A fenced row records nothing else.
func (p *Pool) writeBatch(ctx context.Context, batch []result) {
	for _, r := range batch {
		r.j.recording.Store(true)
	}
	for try := 1; len(batch) > 0; try++ {
		as := make([]store.Attempt, len(batch))
		for i, r := range batch {
			as[i] = store.Attempt{Fence: r.j.mail.Fence, Outcome: r.v.Record}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DBTimeout)
		res, err := p.deps.Store.FinishAttempts(wctx, as)
		cancel()
		if err == nil {
			p.account(batch, res)
			return
		}
		delay := backoff.Delay(try, 20*time.Millisecond, time.Second)
		keep := batch[:0]
		for _, r := range batch {
			if ctx.Err() == nil && time.Now().Add(delay).Before(r.j.deadline(p.cfg.Lease)) {
				keep = append(keep, r)
				continue
			}
			p.metrics.Attempts.WithLabelValues(p.deps.Provider.Name(), r.v.Outcome).Inc()
			p.log.Error("outcome not recorded; the row is left to its lease",
				append(r.j.logAttrs(), "status", r.v.Record.Status, "tries", try, "error", err)...)
			p.disown(r.j)
		}
		batch = keep
		if len(batch) > 0 {
			sleep(ctx, delay)
		}
	}
}

// account accounts for a committed batch.
func (p *Pool) account(batch []result, res []store.AttemptResult) {
	provider := p.deps.Provider.Name()
	wrote := false
	for i, r := range batch {
		if errors.Is(res[i].Err, store.ErrLeaseLost) {
			p.metrics.Attempts.WithLabelValues(provider, OutcomeFenced).Inc()
			p.metrics.FencingRejections.Inc()
			p.log.Warn("lease lost: another worker owns the mail; nothing recorded", r.j.logAttrs()...)
		} else {
			p.metrics.Attempts.WithLabelValues(provider, r.v.Outcome).Inc()
			p.logFinished(r.j, r.v, res[i].Finished)
			wrote = wrote || res[i].Event != ""
		}
		p.disown(r.j)
	}
	if wrote && p.deps.OnOutboxWritten != nil {
		p.deps.OnOutboxWritten()
	}
}

// heartbeatLoop renews the lease of every row the pool owns every third
// of the lease, in one statement, until every outcome was recorded, so
// that a slow but alive pool is not overtaken. A row whose renewal is
// refused lost its lease: its send is cut or skipped.
func (p *Pool) heartbeatLoop() {
	t := time.NewTicker(p.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-p.recorded:
			return
		case <-t.C:
			p.renewAll()
		}
	}
}

func (p *Pool) renewAll() {
	p.ownedMu.Lock()
	jobs := make([]*job, 0, len(p.owned))
	for _, j := range p.owned {
		if !j.recording.Load() && !j.lost.Load() {
			jobs = append(jobs, j)
		}
	}
	p.ownedMu.Unlock()
	if len(jobs) == 0 {
		return
	}
	fences := make([]store.Fence, len(jobs))
	for i, j := range jobs {
		fences[i] = j.mail.Fence
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DBTimeout)
	defer cancel()
	renewed, err := p.deps.Store.RenewLeases(ctx, fences, p.cfg.Lease)
	if err != nil {
		p.log.Warn("renew leases", "rows", len(fences), "error", err)
		return
	}
	held := make(map[store.Fence]bool, len(renewed))
	for _, f := range renewed {
		held[f] = true
	}
	for _, j := range jobs {
		switch {
		case held[j.mail.Fence]:
			j.leaseEnd.Store(start.Add(p.cfg.Lease).UnixNano())
		case !j.recording.Load():
			// Not being recorded by us, not held: another worker owns it.
			j.markLost()
			p.metrics.FencingRejections.Inc()
			p.log.Warn("lease lost: another worker owns the mail", j.logAttrs()...)
		}
	}
}

func (p *Pool) logFinished(j *job, v verdict, fin store.Finished) {
	attrs := append(j.logAttrs(), "status", fin.Status)
	if v.Record.ProviderMessageID != "" {
		attrs = append(attrs, "provider_message_id", v.Record.ProviderMessageID)
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
			lvl = slog.LevelError // the payload changed between attempts: a bug, alert
		}
		p.log.Log(context.Background(), lvl, "mail finished without delivery", append(attrs,
			"error_class", v.Record.ErrorClass, "error_reason", v.Record.ErrorReason, "error", v.Record.Error)...)
	}
}
