package relay

// SetAfterConfirm installs a hook that runs after each round's confirms and
// before its results are recorded. Call it before Start.
func SetAfterConfirm(r *Relay, f func()) { r.afterConfirm = f }
