package sender

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/store"
)

// maxWriteBatch bounds the outcomes and marks one transaction writes.
const maxWriteBatch = 128

// writeRequest is what a worker asks the writer for: to record out (the
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
// stopping while the database refuses the write. out's row is disowned
// once written.
func (p *Pool) commit(out *result, j *job) (store.Started, time.Time, bool) {
	req := &writeRequest{out: out, start: j, reply: make(chan startReply, 1)}
	p.writes <- req
	r := <-req.reply
	if out != nil {
		p.disown(out.j)
	}
	if r.ok {
		j.leaseEnd.Store(r.leaseEnd.UnixNano())
	}
	return r.st, r.leaseEnd, r.ok
}

// writeLoop writes until writes closes: every request waiting when a
// write starts goes into the same transaction (group commit), so the
// outcomes and marks of many workers share one commit.
func (p *Pool) writeLoop(soft, hard context.Context) {
	batch := make([]*writeRequest, 0, maxWriteBatch)
	for r := range p.writes {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxWriteBatch {
			select {
			case r, ok := <-p.writes:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		p.writeBatch(soft, hard, batch)
	}
}

// writeBatch commits a batch and answers every request. A database error
// does not lose an outcome: the write is retried with backoff until it
// commits or the pool is stopped hard, however long the outage (the lease
// may expire meanwhile: the janitor gives the send a grace, and a sent or
// failed outcome written late still lands, see store.Attempt.Settle). Only
// a hard stop gives up; the row then waits for the janitor. Marks are
// given up at a soft stop: no send starts while the database refuses the
// mark, which renews the lease.
func (p *Pool) writeBatch(soft, hard context.Context, batch []*writeRequest) {
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
		as[i] = store.Attempt{Fence: o.j.mail.Fence, Outcome: o.v.Record}
	}
	for try := 1; ; try++ {
		fences := make([]store.Fence, len(starts))
		for i, r := range starts {
			fences[i] = r.start.mail.Fence
		}
		before := time.Now()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(hard), p.cfg.DBTimeout)
		res, started, err := p.deps.Store.FinishAndStart(wctx, as, fences, p.startLease())
		cancel()
		if err == nil {
			p.account(outs, res)
			answer(batch, started, before)
			return
		}
		if hard.Err() != nil {
			p.giveUp(outs, try, err)
			answer(batch, nil, time.Time{})
			return
		}
		if soft.Err() != nil && len(starts) > 0 {
			starts = nil // answered not ok below, with the outcomes
		}
		if try == 1 || try%20 == 0 {
			p.log.Warn("record outcomes and mark sends: retrying until the database answers; no send starts meanwhile",
				"outcomes", len(outs), "starts", len(starts), "tries", try, "error", err)
		}
		if len(outs) == 0 && len(starts) == 0 {
			answer(batch, nil, time.Time{})
			return
		}
		sleep(hard, backoff.Delay(try, 20*time.Millisecond, time.Second))
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
func (p *Pool) startLease() store.StartLease {
	need := p.cfg.DBTimeout + p.cfg.SendTimeout + p.margin()
	if p.fallback() != nil {
		need += p.cfg.SendTimeout
	}
	keep := max(p.cfg.Lease-p.cfg.Lease/4, need)
	return store.StartLease{Renew: p.cfg.Lease, Keep: min(keep, p.cfg.Lease)}
}

// giveUp logs the outcomes a hard stop leaves unwritten.
func (p *Pool) giveUp(outs []result, try int, err error) {
	for _, o := range outs {
		p.log.Error("outcome not recorded before the shutdown timeout; the janitor settles the row after its lease",
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
