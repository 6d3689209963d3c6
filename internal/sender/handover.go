package sender

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"
)

// IngestStore is what a Handover records events with; *store.Store
// implements it.
type IngestStore interface {
	// IngestLeased records items and leases fresh mails to this process
	// (store.Store.IngestLeased).
	IngestLeased(ctx context.Context, items []store.IngestItem, l store.IngestLease) ([]store.IngestResult, []store.ClaimedMail, error)
	// CheckWritable checks that the database accepts writes.
	CheckWritable(ctx context.Context) error
}

// Handover is the consumer's store when the consumer and the pool run in
// one process: the mails an insert writes are leased to the pool in the
// insert's own statement and handed to its executors in memory, rendered,
// with no claim and no re-read (docs/design.md, "Rows handed over in
// memory"). It leases only while the pool's dispatcher waits for work
// (nothing older is due), no route is paused or held back, leases renew
// and the rate limit has tokens, and never more than the pool may hold;
// otherwise, and for a batch with a cancel or a stale mail, the rows are
// written pending and claimed as usual. Its Ingest has the contract of
// store.Store.Ingest. Safe for concurrent use.
type Handover struct {
	pool  *Pool
	store IngestStore
}

// Handover returns the Recorder that hands s's inserts over to p.
func (p *Pool) Handover(s IngestStore) *Handover {
	return &Handover{pool: p, store: s}
}

// Ingest records items (store.Store.Ingest) and hands the mails it leased
// to the pool.
func (h *Handover) Ingest(ctx context.Context, items []store.IngestItem) ([]store.IngestResult, error) {
	d := h.pool.dispatcher
	n := d.reserve(leasable(items))
	leaseEnd := d.clock.Now().Add(d.cfg.Lease) // counted from before the statement, as a claim's
	res, rows, err := h.store.IngestLeased(ctx, items, store.IngestLease{Max: n, Lease: d.cfg.Lease, Worker: d.cfg.WorkerID})
	d.hand(n, rows, leaseEnd)
	return res, err
}

// CheckWritable checks that the database accepts writes.
func (h *Handover) CheckWritable(ctx context.Context) error { return h.store.CheckWritable(ctx) }

// leasable is how many of items an insert may lease: the fresh mails
// without attachments of a batch of fresh mails only.
func leasable(items []store.IngestItem) int {
	n := 0
	for _, it := range items {
		switch {
		case it.Cancel != nil || it.Mail.Stale:
			return 0
		case !it.Mail.HasAttachments:
			n++
		}
	}
	return n
}

// reserve reserves room for up to n handed rows (holdings.reserve) while
// the pool would claim them at once: leases renew, every route is open,
// no latency guard holds the pool back, and the rate limit has a token
// for each now.
func (d *dispatcher) reserve(n int) int {
	if n == 0 || d.held.renewFailing.Load() || !d.router.routable() || d.router.guardEngaged() {
		return 0
	}
	got := d.held.reserve(n)
	if d.limiter != nil && got > 0 {
		now := d.clock.Now()
		tokens := min(got, int(d.limiter.TokensAt(now)))
		if tokens <= 0 || !d.limiter.AllowN(now, tokens) {
			tokens = 0
		}
		d.held.unreserve(got - tokens)
		got = tokens
	}
	return got
}

// hand holds and queues the rows an insert leased in reserved rows'
// places, and frees the places left over. Once the queue closed (the pool
// stops), the rows are left to their lease: reclaimed silently once it
// expires, never sent by this process.
func (d *dispatcher) hand(reserved int, rows []store.ClaimedMail, leaseEnd time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.held.unreserve(reserved)
		return
	}
	for i := range rows {
		j := newJob(rows[i], leaseEnd)
		d.held.ownReserved(j)
		d.queue <- j
		d.metrics.HandedOver.WithLabelValues(rows[i].Lane.String()).Inc()
	}
	d.held.unreserve(reserved - len(rows))
}
