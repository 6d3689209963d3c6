package sender_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// agingStore makes every row a send-started mark finds look as if it had
// waited in the pool's queue since its last claim or renewal: just before
// the mark, its lease is set to end left from now (database clock). Its
// reply then takes replyDelay more (a slow link to the database).
type agingStore struct {
	sender.Store
	st         *store.Store
	left       time.Duration
	replyDelay time.Duration
	marks      atomic.Int32
}

func newAgingStore(t *testing.T, b *bundle, left, replyDelay time.Duration) *agingStore {
	t.Helper()
	return &agingStore{Store: b.sc.Store, st: b.sc.Store, left: left, replyDelay: replyDelay}
}

// FinishAndStart ages the rows of starts, then writes, then delays its
// answer by replyDelay.
func (a *agingStore) FinishAndStart(ctx context.Context, as []store.Attempt, starts []store.Fence, lease store.StartLease) ([]store.AttemptResult, []store.Started, error) {
	if len(starts) > 0 {
		a.marks.Add(1)
		ids := make([]int64, len(starts))
		for i, f := range starts {
			ids[i] = f.ID
		}
		if err := storetest.SetLeaseLeft(ctx, a.st, ids, a.left); err != nil {
			return nil, nil, err
		}
	}
	res, started, err := a.Store.FinishAndStart(ctx, as, starts, lease)
	if err == nil && len(starts) > 0 && a.replyDelay > 0 {
		slow := time.NewTimer(a.replyDelay) // the slow link, the fault under test
		select {
		case <-slow.C:
		case <-ctx.Done():
			slow.Stop()
		}
	}
	return res, started, err
}

// A row that waited in the queue has less than a whole lease left at its
// mark, and a slow database answers the mark late, well inside the
// statement timeout. The mark must leave the send as much room as a
// renewal would: the mail goes out on its first claim, once.
func TestSlowMarkOfAQueuedRowStillSends(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.Workers, cfg.BatchSize = 1, 1
	cfg.Lease, cfg.SendTimeout = 3*time.Second, time.Second // margin 300ms
	// 2.3s left at the mark, answered 1.1s late: 1.1 + 1 + 0.3 fits in a
	// renewed lease of 3s, not in the 2.3s left.
	as := newAgingStore(t, b, 2300*time.Millisecond, 1100*time.Millisecond)
	b.start(t, cfg, sender.Deps{Store: as})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 1, as.marks.Load(), "one mark, no release")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND sends = 1`, id))
}

// The primary relay never greets, so its call ends at the send timeout;
// the failure proves it took nothing, and the fallback takes the mail in
// the same attempt. A mark that kept the lease of a queued row must leave
// room for that second send, as a renewal would.
func TestFailoverAfterAPrimaryTimeoutFitsInAKeptLease(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Greeting, smtptest.Hang(), smtptest.Hang(), smtptest.Hang(), smtptest.Hang(), smtptest.Hang())
	stand, fallback := resendAPI(t)
	id := b.insert(t, "42")
	cfg := failoverConfig()
	cfg.BatchSize = 1
	cfg.Lease, cfg.SendTimeout = 2800*time.Millisecond, time.Second // margin 280ms
	// 2.2s left at the mark: the primary's 1s plus a second send of 1s
	// and the margin fit in a renewed lease of 2.8s, not in 2.2s.
	as := newAgingStore(t, b, 2200*time.Millisecond, 0)
	_, m := b.start(t, cfg, sender.Deps{Store: as, Fallback: fallback})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Len(t, stand.Sent(), 1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND provider = 'resend' AND sends = 1`, id))
	require.EqualValues(t, 1, value(m.Failovers.WithLabelValues("smtp", "resend")))
	require.Zero(t, b.srv.Count())
}
