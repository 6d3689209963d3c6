package sender

// laneShare splits each claim between the priority lanes by weight
// (Config.PriorityWeight priority rows to one bulk row while both lanes
// have due rows): the share of a claim of n rows is n·w/(w+1), and the
// fraction a whole number of rows cannot take is carried to the next
// claim, so that over many small claims the lanes get exactly w:1 (a claim
// of 4 rows at 4:1 gives the priority lane 3, then 3, 3, 3, then 4). The
// store gives a lane's unused share to the other (store.ClaimParams), so
// a lane with nothing due costs the other nothing. Weight 0 is strict
// priority. Used by the dispatcher goroutine alone.
type laneShare struct {
	weight int
	carry  float64 // in [0, 1)
}

// next returns the most priority rows a claim of n rows takes while bulk
// rows are due, and whether the claim is weighted at all.
func (l *laneShare) next(n int) (share int, weighted bool) {
	if l.weight <= 0 {
		return n, false
	}
	want := float64(n)*float64(l.weight)/float64(l.weight+1) + l.carry
	share = min(int(want), n)
	l.carry = want - float64(share)
	if l.carry >= 1 { // share was capped at n
		l.carry = 0
	}
	return share, true
}
