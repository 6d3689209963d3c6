package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestRelayLeaseIsExclusivePerSchema(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	a, b := openRelay(t, sc, "relay-a"), openRelay(t, sc, "relay-b")

	epoch, held, err := a.AcquireLease(ctx, "a", time.Hour)
	require.NoError(t, err)
	require.True(t, held)
	require.Equal(t, int64(1), epoch)
	_, held, err = b.AcquireLease(ctx, "b", time.Hour)
	require.NoError(t, err)
	require.False(t, held, "another holder's current lease is not taken")
	holder, remaining, err := b.LeaseHolder(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", holder)
	require.InDelta(t, time.Hour.Seconds(), remaining.Seconds(), 60)

	again, held, err := a.AcquireLease(ctx, "a", time.Hour)
	require.NoError(t, err)
	require.True(t, held, "a holder takes its own lease back")
	require.Equal(t, epoch+1, again, "as a new epoch")
	require.ErrorIs(t, a.RenewLease(ctx, epoch, time.Hour), store.ErrRelayLeaseLost, "the old epoch is fenced off")
	require.NoError(t, a.RenewLease(ctx, again, time.Hour))

	// Another schema in the same database has its own lease.
	other := storetest.New(t)
	_, held, err = openRelay(t, other, "relay-c").AcquireLease(ctx, "b", time.Hour)
	require.NoError(t, err)
	require.True(t, held)

	require.NoError(t, a.ReleaseLease(ctx, again))
	next, held, err := b.AcquireLease(ctx, "b", time.Hour)
	require.NoError(t, err)
	require.True(t, held, "a released lease is free at once")
	require.Equal(t, again+1, next)
	require.NoError(t, a.ReleaseLease(ctx, again), "releasing a lease taken over changes nothing")
	_, held, err = a.AcquireLease(ctx, "a", time.Hour)
	require.NoError(t, err)
	require.False(t, held)
}

func TestRelayLeaseExpiryHandsOverAndFencesTheOldLeader(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2"), feedback("3")))
	ids := []int64{b.rowIDs(t, "1")[0], b.rowIDs(t, "2")[0], b.rowIDs(t, "3")[0]}
	old := b.sess
	require.NoError(t, old.RenewLease(ctx, old.epoch, 300*time.Millisecond), "renewing sets the expiry from now")
	require.Len(t, fetchIDs(t, old, 10), 3)

	other := &relaySession{RelayDB: openRelay(t, b.sc, "relay-next")}
	require.Eventually(t, func() bool {
		epoch, held, err := other.AcquireLease(ctx, "next", time.Hour)
		require.NoError(t, err)
		other.epoch = epoch
		return held
	}, 10*time.Second, 20*time.Millisecond, "an expired lease goes to the next relay")
	require.Equal(t, old.epoch+1, other.epoch)

	require.Empty(t, fetchIDs(t, old, 10), "the old leader fetches nothing")
	_, err := old.RecordOutboxResults(ctx, ids[:1], nil, 3)
	require.ErrorIs(t, err, store.ErrRelayLeaseLost)
	_, err = old.RecordOutboxResults(ctx, ids[:1], []store.OutboxFailure{{ID: ids[1], Error: "nack", MayDie: true}}, 3)
	require.ErrorIs(t, err, store.ErrRelayLeaseLost)
	require.ErrorIs(t, old.RenewLease(ctx, old.epoch, time.Hour), store.ErrRelayLeaseLost)
	require.Equal(t, int64(0), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL OR attempts > 0`),
		"the old leader wrote nothing")

	require.Equal(t, ids, fetchIDs(t, other, 10))
	got, err := other.RecordOutboxResults(ctx, ids[:1], []store.OutboxFailure{{ID: ids[1], Error: "nack", MayDie: true}}, 3)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(1), b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`))
}

func TestRelayLeaseExpiredButNotTakenRenews(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1")))
	require.NoError(t, b.sess.RenewLease(ctx, b.sess.epoch, time.Millisecond))
	require.Eventually(t, func() bool {
		_, remaining, err := b.sess.LeaseHolder(ctx)
		require.NoError(t, err)
		return remaining < 0
	}, 10*time.Second, 5*time.Millisecond)
	require.Empty(t, fetchIDs(t, b.sess, 10), "nothing is fetched on an expired lease")
	require.NoError(t, b.sess.RenewLease(ctx, b.sess.epoch, time.Hour), "nobody took it: no other relay published since")
	require.Len(t, fetchIDs(t, b.sess, 10), 1)
}

func TestRelayLeaseGoesToOneOfManyRacers(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	const racers = 6
	dbs := make([]*store.RelayDB, racers)
	for i := range dbs {
		dbs[i] = openRelay(t, sc, "relay-racer")
	}
	for round := 1; round <= 3; round++ {
		var mu sync.Mutex
		var won []int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				epoch, held, err := db.AcquireLease(ctx, string(rune('a'+i)), time.Hour)
				if err == nil && held {
					mu.Lock()
					won = append(won, epoch)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Len(t, won, 1, "round %d", round)
		require.Equal(t, int64(round), won[0])
		require.NoError(t, dbs[0].ReleaseLease(ctx, won[0]))
	}
}
