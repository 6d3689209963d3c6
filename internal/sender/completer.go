package sender

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// maxWriteBatch bounds the outcomes and marks one transaction writes.
const maxWriteBatch = 128

// completer is the pool's one writer (River's batch completer is its
// model): the executors hand it their outcomes and the send-started marks
// of their next sends, and it commits every request waiting when a write
// starts in one transaction (group commit), each row fenced by its token.
// It accounts for what it wrote (metrics, the "mail finished" line, the
// relay's wake-up). Its requests channel has room for every row the pool
// may hold, so no executor blocks on it for long.
type completer struct {
	clock   clockwork.Clock
	store   Store
	cfg     Config
	lease   store.StartLease // what a mark does with the lease (startLease)
	metrics *Metrics
	log     *slog.Logger
	// finishLog is log without the pool's provider attribute: the "mail
	// finished" line names the provider that made the send (the fallback,
	// after a failover), and a JSON line must not carry the key twice.
	finishLog *slog.Logger
	// primary names sender.provider, the provider of an outcome that names
	// none.
	primary string
	// onOutbox is Deps.OnOutboxWritten.
	onOutbox func()
	writes   chan *writeRequest
}

func newCompleter(cfg Config, deps Deps, fallback bool, metrics *Metrics, log, finishLog *slog.Logger, room int) *completer {
	return &completer{clock: deps.Clock, store: deps.Store, cfg: cfg, lease: startLease(cfg, fallback), metrics: metrics,
		log: log, finishLog: finishLog, primary: deps.Provider.Name(), onOutbox: deps.OnOutboxWritten,
		writes: make(chan *writeRequest, room)}
}

// writeRequest is what a worker asks the completer for: to record out (the
// previous send's outcome), to mark start's send as started, or both, in
// one transaction. reply is answered once it committed (or was given up).
type writeRequest struct {
	out   *result
	start *job
	reply chan startReply
}

// startReply answers the start of a writeRequest: ok with the row's
// counters and its lease end (local clock, counted from before the
// statement), or not ok when the send must not start.
type startReply struct {
	ok       bool
	st       store.Started
	leaseEnd time.Time
}

// commit writes out (may be nil) and marks j's send as started (j may be
// nil), and waits for the commit. It reports the row's counters and its
// lease end after the mark (startLease); ok is false when j's send must
// not start: its lease was lost, a cancel was requested, or the pool is
// stopping while the database refuses the write.
func (c *completer) commit(out *result, j *job) (store.Started, time.Time, bool) {
	req := &writeRequest{out: out, start: j, reply: make(chan startReply, 1)}
	c.writes <- req
	r := <-req.reply
	if r.ok {
		j.leaseEnd.Store(r.leaseEnd.UnixNano())
	}
	return r.st, r.leaseEnd, r.ok
}

// writeLoop writes until writes closes: every request waiting when a
// write starts goes into the same transaction (group commit), so the
// outcomes and marks of many workers share one commit.
func (c *completer) writeLoop(soft, hard context.Context) {
	batch := make([]*writeRequest, 0, maxWriteBatch)
	for r := range c.writes {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxWriteBatch {
			select {
			case r, ok := <-c.writes:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		if !hasStart(batch) {
			batch = c.linger(batch)
		}
		c.writeBatch(soft, hard, batch)
	}
}

// hasStart reports whether a request of batch marks a send started.
func hasStart(batch []*writeRequest) bool {
	for _, r := range batch {
		if r.start != nil {
			return true
		}
	}
	return false
}

// linger holds a batch of outcomes alone for up to cfg.OutcomeLinger on
// the pool's clock, taking the requests that come meanwhile, until one
// marks a send started (it must not wait: a send waits for it) or the
// batch is full; then the outcomes and that mark share one commit.
func (c *completer) linger(batch []*writeRequest) []*writeRequest {
	if c.cfg.OutcomeLinger <= 0 {
		return batch
	}
	t := c.clock.NewTimer(c.cfg.OutcomeLinger)
	defer t.Stop()
	for len(batch) < maxWriteBatch {
		select {
		case r, ok := <-c.writes:
			if !ok {
				return batch
			}
			batch = append(batch, r)
			if r.start != nil {
				return batch
			}
		case <-t.Chan():
			return batch
		}
	}
	return batch
}

// writeBatch commits a batch and answers every request. A database error
// does not lose an outcome: the write is retried with backoff until it
// commits or the pool is stopped hard, however long the outage (the lease
// may expire meanwhile: the janitor gives the send a grace, and a sent or
// failed outcome written late still lands, see store.Attempt.Settle). Only
// a hard stop gives up; the row then waits for the janitor. Marks are
// given up at a soft stop: no send starts while the database refuses the
// mark, which renews the lease.
func (c *completer) writeBatch(soft, hard context.Context, batch []*writeRequest) {
	var outs []result
	var starts []*writeRequest
	for _, r := range batch {
		if r.out != nil {
			r.out.j.recording.Store(true)
			outs = append(outs, *r.out)
		}
		if r.start != nil {
			starts = append(starts, r)
		}
	}
	as := make([]store.Attempt, len(outs))
	for i, o := range outs {
		as[i] = o.attempt()
	}
	for try := 1; ; try++ {
		fences := make([]store.Fence, len(starts))
		for i, r := range starts {
			fences[i] = r.start.mail.Fence
		}
		before := c.clock.Now()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(hard), c.cfg.DBTimeout)
		res, started, err := c.store.FinishAndStart(wctx, as, fences, c.lease)
		cancel()
		if err == nil {
			c.account(outs, res)
			answer(batch, started, before)
			return
		}
		if hard.Err() != nil {
			c.giveUp(outs, try, err)
			answer(batch, nil, time.Time{})
			return
		}
		if soft.Err() != nil && len(starts) > 0 {
			starts = nil // answered not ok below, with the outcomes
		}
		if try == 1 || try%20 == 0 {
			c.log.Warn("record outcomes and mark sends: retrying until the database answers; no send starts meanwhile",
				"outcomes", len(outs), "starts", len(starts), "tries", try, "error", err)
		}
		if len(outs) == 0 && len(starts) == 0 {
			answer(batch, nil, time.Time{})
			return
		}
		sleep(c.clock, hard, backoff.Delay(try, 20*time.Millisecond, time.Second))
	}
}

// startLease is what a send-started mark does with the lease: it keeps a
// lease with at least three quarters of sender.lease left (a claim of a
// moment ago, or one the heartbeat renewed), so that the mark is a
// heap-only update that adds no index entry (store.StartLease), and
// renews a shorter one to the whole lease. A kept lease must hold all a
// renewal would let the attempt do (work's and sendVia's checks): the mark
// itself, which may take up to the statement timeout, then a whole send
// and the margin, and with a fallback provider the primary's send before
// it. Where three quarters of the lease are less than that, the mark keeps
// only a lease that holds it, and with a short lease it renews every time.
func startLease(cfg Config, fallback bool) store.StartLease {
	need := cfg.DBTimeout + cfg.SendTimeout + margin(cfg)
	if fallback {
		need += cfg.SendTimeout
	}
	keep := max(cfg.Lease-cfg.Lease/4, need)
	return store.StartLease{Renew: cfg.Lease, Keep: min(keep, cfg.Lease)}
}

// giveUp logs the outcomes a hard stop leaves unwritten.
func (c *completer) giveUp(outs []result, try int, err error) {
	for _, o := range outs {
		c.log.Error("outcome not recorded before the shutdown timeout; the janitor settles the row after its lease",
			append(o.j.logAttrs(), "status", o.v.Record.Status, "tries", try, "error", err)...)
	}
}

// answer replies to every request of batch: a start is ok when its fence
// is among started, its lease end counted from before, an instant taken
// before the write.
func answer(batch []*writeRequest, started []store.Started, before time.Time) {
	got := make(map[store.Fence]store.Started, len(started))
	for _, st := range started {
		got[st.Fence] = st
	}
	for _, r := range batch {
		if r.start == nil {
			r.reply <- startReply{}
			continue
		}
		st, ok := got[r.start.mail.Fence]
		r.reply <- startReply{ok: ok, st: st, leaseEnd: before.Add(st.LeaseLeft)}
	}
}

// account accounts for a committed batch of outcomes.
func (c *completer) account(batch []result, res []store.AttemptResult) {
	wrote := false
	for i, r := range batch {
		provider := r.v.Record.Provider // the provider that made the attempt
		if provider == "" {
			provider = c.primary
		}
		switch {
		case errors.Is(res[i].Err, store.ErrLeaseLost):
			c.metrics.Attempts.WithLabelValues(provider, OutcomeFenced).Inc()
			c.metrics.FencingRejections.Inc()
			c.log.Warn("lease lost: another worker owns the mail; nothing recorded", r.j.logAttrs()...)
		case r.v.Record.Release:
			wrote = wrote || res[i].Event != ""
		default:
			c.metrics.Attempts.WithLabelValues(provider, r.v.Outcome).Inc()
			c.metrics.countAmbiguous(provider, r.v.Record, res[i].Status)
			c.logFinished(r.j, r.v, res[i].Finished)
			wrote = wrote || res[i].Event != ""
		}
	}
	if wrote && c.onOutbox != nil {
		c.onOutbox()
	}
}

// logFinished logs what the write of j's outcome did: a retry, or the one
// line of a mail that finished (logMailFinished).
func (c *completer) logFinished(j *job, v verdict, fin store.Finished) {
	if fin.Status != mailtype.StatusPending {
		logMailFinished(c.finishLog, c.cfg.OutcomeLevel, fin, v.Record)
		return
	}
	attrs := append(j.logAttrs(), "status", fin.Status)
	c.log.Info("send failed; will retry", append(attrs, "error_reason", v.Record.ErrorReason,
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
