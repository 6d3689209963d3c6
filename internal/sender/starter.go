package sender

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/store"
)

// startRequest asks the starter to mark j's send as started.
type startRequest struct {
	j     *job
	reply chan startReply
}

// startReply answers a startRequest: ok with the row's counters and the
// renewed lease end (local clock, counted from before the statement), or
// not ok when the send must not start.
type startReply struct {
	ok       bool
	st       store.Started
	leaseEnd time.Time
}

// start marks j's send as started and returns the row's counters and the
// renewed lease end. It returns false when the send must not start: the
// lease was lost, a cancel was requested, or the pool is stopping while
// the database refuses the mark.
func (p *Pool) start(soft, hard context.Context, j *job) (store.Started, time.Time, bool) {
	req := startRequest{j: j, reply: make(chan startReply, 1)}
	p.starts <- req
	r := <-req.reply
	if r.ok {
		j.leaseEnd.Store(r.leaseEnd.UnixNano())
	}
	return r.st, r.leaseEnd, r.ok
}

// startLoop writes send-started marks until starts closes: every request
// waiting when a write starts goes into the same statement, so workers
// that start together share one round trip.
func (p *Pool) startLoop(soft, hard context.Context) {
	batch := make([]startRequest, 0, p.cfg.Workers)
	for r := range p.starts {
		batch = append(batch[:0], r)
	more:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-p.starts:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		p.markBatch(soft, hard, batch)
	}
}

// markBatch writes the marks of batch and answers every request. A
// database error is retried with backoff (no send starts meanwhile: a
// worker that cannot renew its lease starts nothing) until the pool stops.
func (p *Pool) markBatch(soft, hard context.Context, batch []startRequest) {
	fences := make([]store.Fence, len(batch))
	for i, r := range batch {
		fences[i] = r.j.mail.Fence
	}
	for try := 1; ; try++ {
		before := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(hard), p.cfg.DBTimeout)
		started, err := p.deps.Store.MarkStarted(ctx, fences, p.cfg.Lease)
		cancel()
		if err == nil {
			answer(batch, started, before.Add(p.cfg.Lease))
			return
		}
		if soft.Err() != nil {
			answer(batch, nil, time.Time{})
			return
		}
		p.log.Warn("mark sends started; no send starts until it works", "rows", len(batch), "tries", try, "error", err)
		sleep(hard, backoff.Delay(try, 20*time.Millisecond, time.Second))
	}
}

func answer(batch []startRequest, started []store.Started, leaseEnd time.Time) {
	got := make(map[store.Fence]store.Started, len(started))
	for _, st := range started {
		got[st.Fence] = st
	}
	for _, r := range batch {
		st, ok := got[r.j.mail.Fence]
		r.reply <- startReply{ok: ok, st: st, leaseEnd: leaseEnd}
	}
}
