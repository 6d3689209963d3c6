package sender

import (
	"sync/atomic"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"
)

// job is one claimed row on its way through the pool.
type job struct {
	mail store.ClaimedMail
	// leaseEnd (unix nanoseconds, local clock) is when the lease ends;
	// heartbeats and the send-started mark push it forward.
	leaseEnd atomic.Int64
	// lost is set when a heartbeat found the lease taken before the send
	// started; the worker then skips the row.
	lost atomic.Bool
	// recording is set once the completer writes the outcome; the heartbeat
	// no longer judges the row then (the write may have finished it).
	recording atomic.Bool
	// sent is set once the row is no longer queued or being sent.
	sent atomic.Bool
	// probe, when set, is the paused provider this mail probes: it is sent
	// through it despite the pause, and its outcome ends or extends the
	// pause.
	probe *gate
	// slotAt is when the send slot of the rate-limited provider the row
	// goes to may be used (waitSlot); zero without a rate limit.
	slotAt time.Time
	// admitted is the provider whose latency guard admitted the row's send
	// (router.guard); work ends the admission.
	admitted *gate
	// started is the row's send-started mark, set by the worker once it
	// committed (TotalSends 0 before): the completer encodes the
	// outcome's event from it and the claim (store.Known).
	started store.Started
}

// result is a verdict on its way to the completer.
type result struct {
	j *job
	v verdict
}

// attempt is the outcome's write: the verdict's record fenced by the
// claim, with what the claim and the mark tell of the row when the send
// was marked started.
func (r *result) attempt() store.Attempt {
	a := store.Attempt{Fence: r.j.mail.Fence, Outcome: r.v.Record}
	if r.j.started.TotalSends > 0 {
		a.Known = r.j.mail.Known(r.j.started)
	}
	return a
}

func newJob(m store.ClaimedMail, leaseEnd time.Time) *job {
	j := &job{mail: m}
	j.leaseEnd.Store(leaseEnd.UnixNano())
	return j
}

func (j *job) logAttrs() []any {
	return []any{"dedupe_key", j.mail.DedupeKey, "event_id", j.mail.EventID, "attempts", j.mail.Sends + 1}
}
