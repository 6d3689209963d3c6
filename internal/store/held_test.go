package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// confirmTo is a fresh confirmation of order to address to.
func confirmTo(orderID, to string) store.IngestItem {
	it := confirm(orderID)
	it.Mail.ToEmail = to
	return it
}

// limited opens a store on b's schema with the per-recipient limit.
func (b *ingestBundle) limited(t *testing.T, mails int) *store.Store {
	t.Helper()
	return b.sc.Open(t, store.Options{RecipientLimit: store.RecipientLimit{Mails: mails, Window: time.Hour}})
}

// Mails over the limit are recorded held, counted per address lower-cased;
// another address, a duplicate and a stale mail are not counted.
func TestRecipientLimitHoldsTheMailsOverIt(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	st := b.limited(t, 3)
	dup := confirmTo("o1", "b@example.com")
	stale := confirmTo("o9", "b@example.com")
	stale.Mail.Stale = true
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionInserted, mailtype.DispositionStale,
		mailtype.DispositionInserted, mailtype.DispositionHeld, mailtype.DispositionInserted},
		outcomesOf(t, st, dup, confirmTo("o2", "B@Example.com"), stale, confirmTo("o3", "b@EXAMPLE.com"),
			confirmTo("o4", "b@example.com"), confirmTo("o5", "c@example.com")))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate, mailtype.DispositionHeld},
		outcomesOf(t, st, dup, confirmTo("o6", "b@example.com")))
	require.Equal(t, int64(3), b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending' AND lower(to_email) = 'b@example.com'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM mail WHERE status = 'held'`))
	// The duplicate's second delivery was counted: the count errs towards holding.
	require.Equal(t, int64(6), b.count(t, `SELECT mails FROM recipient_window WHERE recipient = 'b@example.com'`))
	require.Equal(t, int64(1), b.count(t, `SELECT mails FROM recipient_window WHERE recipient = 'c@example.com'`))
	n, err := storetest.ClaimRollback(b.ctx, st, store.ClaimParams{Limit: 100, Lease: time.Minute, Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, 4, n, "a held mail was claimed")
	// Off: the schema's own store has no limit.
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted}, b.ingest(t, confirmTo("o7", "b@example.com")))
}

// Replicas ingesting for one address at once hold exactly the mails over
// the limit between them: the window row's lock orders them.
func TestRecipientLimitHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	replicas := []*store.Store{b.limited(t, 10), b.limited(t, 10), b.limited(t, 10)}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for r, st := range replicas {
		for batch := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var items []store.IngestItem
				for i := range 4 {
					// Two addresses in every batch, in both orders: no deadlock either.
					to := []string{"x@example.com", "y@example.com"}[(i+batch)%2]
					items = append(items, confirmTo(fmt.Sprintf("r%d-b%d-%d", r, batch, i), to))
				}
				_, err := st.Ingest(context.Background(), items)
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, to := range []string{"x@example.com", "y@example.com"} {
		require.Equal(t, int64(10), b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending' AND to_email = $1`, to), to)
		require.Equal(t, int64(50), b.count(t, `SELECT count(*) FROM mail WHERE status = 'held' AND to_email = $1`, to), to)
	}
}

// An operator releases or cancels held mails by address or all of them;
// a cancel writes EmailCancelled with each, a release nothing.
func TestReleaseAndCancelHeld(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	st := b.limited(t, 1)
	var items []store.IngestItem
	for i := range 4 {
		items = append(items, confirmTo(fmt.Sprintf("a%d", i), "a@example.com"), confirmTo(fmt.Sprintf("z%d", i), "z@example.com"))
	}
	outcomesOf(t, st, items...)
	require.Equal(t, int64(6), b.count(t, `SELECT count(*) FROM mail WHERE status = 'held'`))

	n, err := st.ReleaseHeld(b.ctx, store.HeldFilter{To: "A@example.com", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, int64(3), b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending' AND to_email = 'a@example.com' AND send_after <= now()`))
	n, err = st.CancelHeld(b.ctx, store.HeldFilter{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM mail WHERE status = 'held'`))
	require.Equal(t, int64(4), b.count(t, `SELECT count(*) FROM mail WHERE status = 'cancelled'`))
	require.Equal(t, int64(4), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'`))
	require.Equal(t, int64(4), b.count(t, `SELECT count(*) FROM outbox`))
	_, err = st.ReleaseHeld(b.ctx, store.HeldFilter{})
	require.ErrorContains(t, err, "limit: must be positive")
}

// An OrderCancelled cancels a held confirmation as it does a pending one.
func TestOrderCancelledCancelsAHeldMail(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	st := b.limited(t, 1)
	outcomesOf(t, st, confirmTo("h1", "h@example.com"), confirmTo("h2", "h@example.com"))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled},
		outcomesOf(t, st, store.IngestItem{Cancel: &store.Cancel{EventID: uuid.NewString(), OrderID: "h2", Template: "order_confirmed"}}))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE status = 'cancelled' AND order_id = 'h2'`))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelled, mailtype.ConfirmationKey("h2")))
}

// The janitor's sweep forgets windows older than two windows.
func TestOldRecipientWindowsAreDeleted(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.sc.Exec(t, `INSERT INTO recipient_window VALUES ('a', now() - interval '3 hours', 5), ('b', now() - interval '90 minutes', 5), ('c', now(), 5)`)
	n, err := b.sc.Store.DeleteOldRecipientWindows(b.ctx, store.RecipientLimit{Mails: 5, Window: time.Hour}, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM recipient_window`))
}
