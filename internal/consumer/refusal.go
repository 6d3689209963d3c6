package consumer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// A database that answers but refuses writes (read-only after a failover,
// a revoked privilege) is not an outage to sit out holding the prefetch
// window: the connection gives its deliveries back by closing the consuming
// channel, which cancels the subscription and returns every unacked
// delivery in one step, and consumes again only once the database accepts
// a write probe (store.Store.CheckWritable). Not a nack with requeue: the
// broker hands a requeued message straight back to a consumer that still
// consumes, and RabbitMQ 3.10's quorum queues count every return against
// x-delivery-limit, a channel close as much as a nack (measured: one
// each, and a nacked message is redelivered to the same consumer at
// once). A release happens at most once per refusal episode, which only a
// commit ends, so one episode costs each message at most one delivery,
// even if the probe passed while the writes are still refused: then the
// batch is held and retried like during an outage.

// writeRefusalsBeforeRelease is how many attempts in a row to record one
// batch the database may refuse before the deliveries are released: one
// refusal during a failover is ridden out in place.
const writeRefusalsBeforeRelease = 3

// errWritesRefused ends a consuming channel whose deliveries were released
// because the database refuses writes; the connection then waits for the
// database to accept writes and consumes on a new channel.
var errWritesRefused = errors.New("the database refuses writes; deliveries released")

// refusal is the consumer's account of a write-refusal episode. Safe for
// concurrent use.
type refusal struct {
	mu sync.Mutex
	// since is when the database began refusing writes; zero while it
	// accepts them (a commit or a passing write probe clears it).
	since time.Time
	err   error
	// released is set by the release of this episode; only a commit
	// clears it.
	released bool
}

// refused notes a refused write and reports whether it began an episode.
func (r *refusal) refused(err error) (first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first = r.since.IsZero()
	if first {
		r.since = time.Now()
	}
	r.err = err
	return first
}

// claimRelease reports whether the caller may release the deliveries: true
// once per episode.
func (r *refusal) claimRelease() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return false
	}
	r.released = true
	return true
}

// probed notes that the database accepted the write probe.
func (r *refusal) probed() {
	r.mu.Lock()
	r.since, r.err = time.Time{}, nil
	r.mu.Unlock()
}

// committed notes a commit: the episode, if any, is over.
func (r *refusal) committed() {
	r.mu.Lock()
	r.since, r.err, r.released = time.Time{}, nil, false
	r.mu.Unlock()
}

// status returns nil, or an error saying since when writes are refused.
func (r *refusal) status() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return nil
	}
	return fmt.Errorf("the database refuses the consumer's writes since %s: %s",
		r.since.UTC().Format(time.RFC3339), mailtype.Sanitize(r.err.Error()))
}

// countRefusal returns the number of refused attempts in a row, err
// included (0 when err is no refusal), and notes the refusal.
func (l *loop) countRefusal(err error, refusals int) int {
	if !store.IsWriteRefused(err) {
		return 0
	}
	l.c.refusal.refused(err)
	return refusals + 1
}

// release ends the loop to give the deliveries back, unless this episode
// released them already (then the caller holds the batch and retries).
func (l *loop) release() bool {
	if !l.c.refusal.claimRelease() {
		return false
	}
	l.released.Store(true)
	l.end()
	return true
}
