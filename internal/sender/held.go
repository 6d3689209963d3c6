package sender

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/mailsvc/mailsvc/internal/store"
)

// holdings is the set of rows a pool holds, from their claim until their
// outcome was written or left to the janitor, and the bound on them. The
// dispatcher adds rows (own), the executors take them out (sent, disown),
// the heartbeat renews their leases. Safe for concurrent use.
type holdings struct {
	mu   sync.Mutex
	rows map[store.Fence]*job
	// unsent counts the held rows queued or being sent (not those whose
	// outcome waits for its write: at most one per worker). max bounds it;
	// a claim is taken when at least minClaim rows are free.
	unsent        int
	max, minClaim int
	freed         chan struct{} // a row stopped being held
	// renewFailing is set while the heartbeat cannot renew leases: the
	// dispatcher takes no claim then.
	renewFailing atomic.Bool
	// idle is set while the dispatcher waits for work after a claim that
	// found less than it asked for: the only time rows may be handed over
	// (reserve), so that a handed row never passes an older due one.
	idle bool
}

// setIdle records whether the dispatcher waits for work (idle).
func (h *holdings) setIdle(idle bool) {
	h.mu.Lock()
	h.idle = idle
	h.mu.Unlock()
}

// reserve reserves room for up to n rows handed over in memory and
// returns how many (0 unless the dispatcher is idle): they count as held
// and unsent until hand gives them their jobs or unreserve frees them.
func (h *holdings) reserve(n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.idle {
		return 0
	}
	n = max(0, min(n, h.max-h.unsent))
	h.unsent += n
	return n
}

// unreserve frees n reserved rows that were not handed over.
func (h *holdings) unreserve(n int) {
	if n <= 0 {
		return
	}
	h.mu.Lock()
	h.unsent -= n
	h.mu.Unlock()
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// ownReserved holds j in a reserved row's place.
func (h *holdings) ownReserved(j *job) {
	h.mu.Lock()
	h.rows[j.mail.Fence] = j
	h.mu.Unlock()
}

func newHoldings(maxHeld, minClaim int) *holdings {
	return &holdings{rows: make(map[store.Fence]*job, maxHeld), max: maxHeld, minClaim: minClaim,
		freed: make(chan struct{}, 1)}
}

// room waits until at least minClaim rows are free under max and returns
// how many to claim (at most batch), or 0 when ctx ended. The bounds
// (holdBounds) keep the queue short: a claimed row starts soon, and a
// crash strands few unstarted rows (they are reclaimed silently once their
// lease expires).
func (h *holdings) room(ctx context.Context, batch int) int {
	for {
		free := h.max - h.unsentNow()
		if free >= h.minClaim {
			return min(free, batch)
		}
		select {
		case <-h.freed:
		case <-ctx.Done():
			return 0
		}
	}
}

// unsentNow is how many held rows are queued or being sent.
func (h *holdings) unsentNow() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unsent
}

func (h *holdings) own(j *job) {
	h.mu.Lock()
	h.rows[j.mail.Fence] = j
	h.unsent++
	h.mu.Unlock()
}

// sent records that j is no longer queued or being sent; once per job.
func (h *holdings) sent(j *job) {
	if j.sent.Swap(true) {
		return
	}
	h.mu.Lock()
	h.unsent--
	h.mu.Unlock()
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// disown forgets j (its outcome was written, or is left to the janitor).
func (h *holdings) disown(j *job) {
	h.sent(j)
	h.mu.Lock()
	delete(h.rows, j.mail.Fence)
	h.mu.Unlock()
}

// renewable returns the held rows whose lease the heartbeat renews: those
// whose outcome is not being written and whose lease was not lost.
func (h *holdings) renewable() []*job {
	h.mu.Lock()
	defer h.mu.Unlock()
	jobs := make([]*job, 0, len(h.rows))
	for _, j := range h.rows {
		if !j.recording.Load() && !j.lost.Load() {
			jobs = append(jobs, j)
		}
	}
	return jobs
}
