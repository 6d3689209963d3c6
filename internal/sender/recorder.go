package sender

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// account accounts for a committed batch of outcomes.
func (p *Pool) account(batch []result, res []store.AttemptResult) {
	wrote := false
	for i, r := range batch {
		provider := r.v.Record.Provider // the provider that made the attempt
		if provider == "" {
			provider = p.deps.Provider.Name()
		}
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
