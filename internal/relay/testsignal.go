package relay

import "context"

// testSignals are the points in the relay's code where a test may stop it
// to act between two steps, after River's test signals (riverqueue/river,
// internal/testsignal): one typed field per point, the zero value inert,
// enabled only by a test through Init (export_test.go), so that the
// binary carries a nil check per point and nothing else.
type testSignals struct {
	// confirmed is reached by a round after its publisher confirms and
	// before it records their results.
	confirmed pausePoint
}

// Init enables every signal; tests call it before Start.
func (ts *testSignals) Init() {
	ts.confirmed.init()
}

// pausePoint stops the relay at one point of its code while a test acts:
// the first time the relay reaches it, it waits until the test has taken
// the signal (Reached) and then until the test releases it (Release);
// after the release it never waits again. Its zero value is inert: reach
// returns at once.
type pausePoint struct {
	reached  chan struct{}
	released chan struct{}
}

func (p *pausePoint) init() {
	p.reached = make(chan struct{})
	p.released = make(chan struct{})
}

// reach is the relay's side. It gives up when ctx ends (an aborted stop).
func (p *pausePoint) reach(ctx context.Context) {
	if p.reached == nil {
		return
	}
	select {
	case p.reached <- struct{}{}:
	case <-p.released:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-p.released:
	case <-ctx.Done():
	}
}

// Reached is the test's side: it receives once the relay has reached the
// point, and the relay then waits for Release.
func (p *pausePoint) Reached() <-chan struct{} { return p.reached }

// Release lets the relay go on, now and every later time it reaches the
// point. Call it once.
func (p *pausePoint) Release() { close(p.released) }
