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

// logFinished logs what the write of j's outcome did: a retry, or the one
// line of a mail that finished (logMailFinished).
func (p *Pool) logFinished(j *job, v verdict, fin store.Finished) {
	if fin.Status != mailtype.StatusPending {
		logMailFinished(p.finishLog, p.cfg.OutcomeLevel, fin, v.Record)
		return
	}
	attrs := append(j.logAttrs(), "status", fin.Status)
	p.log.Info("send failed; will retry", append(attrs, "error_reason", v.Record.ErrorReason,
		"error", v.Record.Error, "retry_after", v.Record.RetryAfter)...)
}

// logMailFinished writes the one line of a mail that reached a final
// status (sent, failed, cancelled or unknown): "mail finished" with
// dedupe_key, event_id, status, attempts (sends started), provider (""
// when no send reached one, e.g. a release on a cancel), provider_message_id (when the provider gave one) and duration_ms (from
// its row being written to this outcome), plus the error's class, reason
// and text when it did not end sent. Sent and cancelled mails are logged
// at outcomeLevel (log.mail_outcomes), failed and unknown ones at warn, a
// reused idempotency key at error.
func logMailFinished(log *slog.Logger, outcomeLevel slog.Level, fin store.Finished, o store.Outcome) {
	attrs := []any{"dedupe_key", fin.DedupeKey, "event_id", fin.EventID, "status", fin.Status,
		"attempts", fin.Sends, "provider", o.Provider}
	if o.ProviderMessageID != "" {
		attrs = append(attrs, "provider_message_id", o.ProviderMessageID)
	}
	attrs = append(attrs, "duration_ms", time.Since(fin.CreatedAt).Milliseconds())
	lvl := outcomeLevel
	switch {
	case o.ErrorReason == mailtype.ReasonIdempotencyReuse:
		lvl = slog.LevelError // the payload changed between attempts: a bug, alert
	case fin.Status == mailtype.StatusFailed || fin.Status == mailtype.StatusUnknown:
		lvl = slog.LevelWarn
	}
	if fin.Status != mailtype.StatusSent && (o.ErrorReason != "" || o.Error != "") {
		attrs = append(attrs, "error_class", o.ErrorClass, "error_reason", o.ErrorReason, "error", o.Error)
	}
	log.Log(context.Background(), lvl, "mail finished", attrs...)
}
