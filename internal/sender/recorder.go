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

// writeBatch records a batch of verdicts and closes each one's done. A
// database error does not lose them: the write is retried with backoff
// until it commits or the pool is stopped hard, however long the outage
// (the lease may expire meanwhile: the janitor then settles the row
// without a new claim, and a sent or failed outcome written late still
// lands, see store.Attempt.Settle). Only a hard stop gives up; the row then
// waits for the janitor. A fenced row records nothing else.
func (p *Pool) writeBatch(ctx context.Context, batch []result) {
	for _, r := range batch {
		r.j.recording.Store(true)
	}
	as := make([]store.Attempt, len(batch))
	for i, r := range batch {
		as[i] = store.Attempt{Fence: r.j.mail.Fence, Outcome: r.v.Record}
	}
	for try := 1; ; try++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DBTimeout)
		res, err := p.deps.Store.FinishAttempts(wctx, as)
		cancel()
		if err == nil {
			p.account(batch, res)
			return
		}
		if ctx.Err() != nil {
			for _, r := range batch {
				p.log.Error("outcome not recorded before the shutdown timeout; the janitor settles the row after its lease",
					append(r.j.logAttrs(), "status", r.v.Record.Status, "tries", try, "error", err)...)
				close(r.done)
			}
			return
		}
		if try == 1 || try%20 == 0 {
			p.log.Warn("record outcomes: retrying until the database answers", "rows", len(batch), "tries", try, "error", err)
		}
		sleep(ctx, backoff.Delay(try, 20*time.Millisecond, time.Second))
	}
}

// account accounts for a committed batch and closes each one's done.
func (p *Pool) account(batch []result, res []store.AttemptResult) {
	provider := p.deps.Provider.Name()
	wrote := false
	for i, r := range batch {
		switch {
		case errors.Is(res[i].Err, store.ErrLeaseLost):
			p.metrics.Attempts.WithLabelValues(provider, OutcomeFenced).Inc()
			p.metrics.FencingRejections.Inc()
			p.log.Warn("lease lost: another worker owns the mail; nothing recorded", r.j.logAttrs()...)
		case r.v.Record.Release:
			wrote = wrote || res[i].Event != ""
		default:
			p.metrics.Attempts.WithLabelValues(provider, r.v.Outcome).Inc()
			p.metrics.countAmbiguous(provider, r.v.Record, res[i].Status)
			p.logFinished(r.j, r.v, res[i].Finished)
			wrote = wrote || res[i].Event != ""
		}
		close(r.done)
	}
	if wrote && p.deps.OnOutboxWritten != nil {
		p.deps.OnOutboxWritten()
	}
}

// heartbeatLoop renews the lease of every held row whose outcome is not
// being written, every third of the lease, in one statement, until every
// outcome was recorded, so that a queued row is not overtaken while this
// process is alive. A queued row whose renewal is refused lost its lease
// and is skipped. While renewals fail the dispatcher takes no claim; no
// send starts without the mark, which renews the lease itself.
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
	p.heldMu.Lock()
	jobs := make([]*job, 0, len(p.held))
	for _, j := range p.held {
		if !j.recording.Load() && !j.lost.Load() {
			jobs = append(jobs, j)
		}
	}
	p.heldMu.Unlock()
	if len(jobs) == 0 {
		p.renewFailing.Store(false)
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
	p.renewFailing.Store(err != nil)
	if err != nil {
		p.log.Warn("renew leases: no claim is taken until it works", "rows", len(fences), "error", err)
		return
	}
	held := make(map[store.Fence]bool, len(renewed))
	for _, f := range renewed {
		held[f] = true
	}
	for _, j := range jobs {
		switch {
		case held[j.mail.Fence]:
			j.leaseEnd.Store(max(j.leaseEnd.Load(), start.Add(p.cfg.Lease).UnixNano()))
		case !j.recording.Load():
			// Not being recorded by us, not held: another claim owns it, or
			// it is not `sending` any more.
			j.lost.Store(true)
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
