package relay

// PauseAfterConfirm makes r's first publish round stop after its confirms
// and before it records their results: reached receives once the round is
// there, and the round goes on when release is called (every later round
// passes). Call it before Start.
func PauseAfterConfirm(r *Relay) (reached <-chan struct{}, release func()) {
	r.testSignals.Init()
	return r.testSignals.confirmed.Reached(), r.testSignals.confirmed.Release
}
