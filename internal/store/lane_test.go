package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// lanes seeds bulk and priority pending rows (order ids b… and p…).
func lanes(t *testing.T, sc *storetest.Schema, bulk, priority int) {
	t.Helper()
	insertMails(t, sc.Store, bulk, "b")
	insertMails(t, sc.Store, priority, "p")
	_, err := sc.Store.ExecForTest(context.Background(), `UPDATE mail SET lane = 1 WHERE order_id LIKE 'p%'`)
	require.NoError(t, err)
}

// claimByLane claims with p and counts the rows taken per lane, checking
// each row's Lane against its order id.
func claimByLane(t *testing.T, st *store.Store, p store.ClaimParams) (priority, bulk int) {
	t.Helper()
	got, err := st.ClaimMails(context.Background(), p)
	require.NoError(t, err)
	for _, m := range got {
		want := mailtype.LaneBulk
		if m.OrderID[0] == 'p' {
			want = mailtype.LanePriority
		}
		require.Equal(t, want, m.Lane, m.OrderID)
		if m.Lane == mailtype.LanePriority {
			priority++
		} else {
			bulk++
		}
	}
	return priority, bulk
}

func weighted(limit, share int) store.ClaimParams {
	p := claimParams(limit)
	p.Weighted, p.PriorityShare = true, share
	return p
}

// A weighted claim takes the priority lane's share while both lanes have
// due rows; a lane with fewer due rows than its share leaves the rest to
// the other, so an empty lane costs the other nothing.
func TestClaimSharesTheBatchBetweenLanes(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	lanes(t, sc, 20, 20)
	p, b := claimByLane(t, sc.Store, weighted(10, 8))
	require.Equal(t, [2]int{8, 2}, [2]int{p, b}, "both lanes due: the share")
	p, b = claimByLane(t, sc.Store, weighted(10, 0))
	require.Equal(t, [2]int{0, 10}, [2]int{p, b}, "share 0: bulk only")
	p, b = claimByLane(t, sc.Store, weighted(20, 16))
	require.Equal(t, [2]int{12, 8}, [2]int{p, b}, "12 priority rows left: bulk takes the rest of the share")
	p, b = claimByLane(t, sc.Store, weighted(10, 2))
	require.Equal(t, [2]int{0, 0}, [2]int{p, b}, "nothing left")
	require.EqualValues(t, 40, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending'`))
}

func TestClaimGivesAnIdleLaneShareToTheOther(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	lanes(t, sc, 3, 30)
	p, b := claimByLane(t, sc.Store, weighted(10, 2))
	require.Equal(t, [2]int{7, 3}, [2]int{p, b}, "bulk has 3: priority takes the 7 left")
	p, b = claimByLane(t, sc.Store, weighted(10, 2))
	require.Equal(t, [2]int{10, 0}, [2]int{p, b}, "bulk empty: priority takes the whole batch")
}

func TestUnweightedClaimTakesThePriorityLaneFirst(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	lanes(t, sc, 10, 6)
	p, b := claimByLane(t, sc.Store, claimParams(8))
	require.Equal(t, [2]int{6, 2}, [2]int{p, b})
}
