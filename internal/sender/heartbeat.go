package sender

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mailsvc/mailsvc/internal/store"
)

// heartbeatLoop renews the lease of every held row whose outcome is not
// being written, every third of the lease, in one statement, until every
// outcome was recorded, so that a queued row is not overtaken while this
// process is alive. A queued row whose renewal is refused lost its lease
// and is skipped. While renewals fail the dispatcher takes no claim; no
// send starts without the mark, which renews the lease itself.
func (d *dispatcher) heartbeatLoop(done <-chan struct{}) {
	every(d.clock, d.cfg.Lease/3, done, d.renewAll)
}

// every runs f every interval d on clk until done is closed.
func every(clk clockwork.Clock, d time.Duration, done <-chan struct{}, f func()) {
	t := clk.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.Chan():
			f()
		}
	}
}

func (d *dispatcher) renewAll() {
	jobs := d.held.renewable()
	if len(jobs) == 0 {
		d.held.renewFailing.Store(false)
		return
	}
	fences := make([]store.Fence, len(jobs))
	for i, j := range jobs {
		fences[i] = j.mail.Fence
	}
	start := d.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.DBTimeout)
	defer cancel()
	renewed, err := d.store.RenewLeases(ctx, fences, d.cfg.Lease)
	d.held.renewFailing.Store(err != nil)
	if err != nil {
		d.log.Warn("renew leases: no claim is taken until it works", "rows", len(fences), "error", err)
		return
	}
	held := make(map[store.Fence]bool, len(renewed))
	for _, f := range renewed {
		held[f] = true
	}
	for _, j := range jobs {
		switch {
		case held[j.mail.Fence]:
			j.leaseEnd.Store(max(j.leaseEnd.Load(), start.Add(d.cfg.Lease).UnixNano()))
		case !j.recording.Load():
			// Not being recorded by us, not held: another claim owns it, or
			// it is not `sending` any more.
			j.lost.Store(true)
			d.metrics.FencingRejections.Inc()
			d.log.Warn("lease lost: another worker owns the mail", j.logAttrs()...)
		}
	}
}
