package sender

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Over many claims the priority lane's share is exactly weight:1, whatever
// the claim sizes; a claim of one row alternates; weight 0 is strict.
func TestLaneShareIsExactOverClaims(t *testing.T) {
	l := laneShare{weight: 4}
	var shares []int
	for range 5 {
		s, weighted := l.next(4)
		require.True(t, weighted)
		shares = append(shares, s)
	}
	require.Equal(t, []int{3, 3, 3, 3, 4}, shares, "16 of 20 rows: 4:1")

	l = laneShare{weight: 4}
	total := 0
	for _, n := range []int{50, 7, 1, 1, 1, 13, 2, 25} { // 100 rows
		s, _ := l.next(n)
		require.LessOrEqual(t, s, n)
		total += s
	}
	require.Equal(t, 80, total)

	l = laneShare{weight: 1}
	shares = shares[:0]
	for range 4 {
		s, _ := l.next(1)
		shares = append(shares, s)
	}
	require.Equal(t, []int{0, 1, 0, 1}, shares)

	strict := laneShare{}
	s, weighted := strict.next(9)
	require.Equal(t, 9, s)
	require.False(t, weighted)
}
