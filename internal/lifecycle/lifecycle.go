// Package lifecycle is the one Start/Stop implementation of mailsvc's
// long-lived components (the relay, the sender pool, the janitor, the
// consumer, the stats collector and the HTTP server), in the manner of
// River's rivershared/startstop: a component keeps a Life and writes its
// Start and Stop as one call each, so that every component has the same
// rules.
//
// The rules (docs/architecture.md, "Lifecycle"):
//
//   - A Life is used once: new → running → stopped. It cannot be restarted.
//   - Start runs the component's body in a goroutine of its own and returns
//     at once. The first Start that succeeds wins; any later Start (while
//     running or after Stop) returns ErrStarted. A Start whose setup fails
//     leaves the Life new, so Start may be tried again.
//   - Start's context gives values only: its cancellation does not stop the
//     component (the daemon cancels it on SIGTERM, before the Stop that must
//     still drain). Only Stop ends a component.
//   - Stop asks the body to finish (its stop context ends), waits for it to
//     return, and returns what it returned. When Stop's context ends first,
//     Stop aborts the body (its abort context ends) and returns the
//     context's error at once: Stop never outlasts its context. The body
//     then ends in the background; Done tells when.
//   - Stop is idempotent, safe before Start (the Life is then stopped, and a
//     later Start returns ErrStarted), and safe for concurrent use: every
//     caller returns once the body has returned or its own context ended.
//   - A body that returns before Stop asked it to has failed: Done closes,
//     Err holds what it returned (ErrExited when that was nil), and the
//     daemon stops (internal/app watches Done of every component).
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is returned by a Start after the first successful one, or
// after Stop.
var ErrStarted = errors.New("already started or stopped (a component starts once)")

// ErrExited is what Err reports for a body that returned nil before Stop
// asked it to: a component that stopped working by itself.
var ErrExited = errors.New("stopped by itself")

// Func is a component's body. It runs from Start until it returns. stop
// ends when Stop is called: finish the work in hand and return. abort ends
// when Stop's context ended first: cut the work in flight and return
// promptly. abort's end implies stop's end. Both carry the values of
// Start's context.
type Func func(stop, abort context.Context) error

// state is where a Life is.
type state int

const (
	stateNew state = iota
	stateRunning
	stateStopped
)

// Life is the Start/Stop state of one component. The zero value is a new
// Life; it must not be copied after first use. Its methods are safe for
// concurrent use.
type Life struct {
	mu       sync.Mutex
	state    state
	stop     context.CancelFunc
	abort    context.CancelFunc
	done     chan struct{}
	err      error // what the body returned
	finished bool  // the body returned
	stopped  bool  // Stop was called while the body ran
}

// Start runs body in the background. See StartFunc.
func (l *Life) Start(ctx context.Context, body Func) error {
	return l.StartFunc(ctx, func(context.Context) (Func, error) { return body, nil })
}

// StartFunc calls setup, under the Life's lock so that concurrent Starts
// cannot both run it, and then runs the body it returns in the background.
// It returns ErrStarted when the Life is not new, and setup's error (the
// Life stays new) when setup fails; setup gets Start's context and must not
// call the Life's methods.
func (l *Life) StartFunc(ctx context.Context, setup func(context.Context) (Func, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateNew {
		return ErrStarted
	}
	body, err := setup(ctx)
	if err != nil {
		return err
	}
	abortCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	stopCtx, stop := context.WithCancel(abortCtx)
	l.state, l.stop, l.abort = stateRunning, stop, abort
	if l.done == nil {
		l.done = make(chan struct{})
	}
	done := l.done
	go func() {
		err := body(stopCtx, abortCtx)
		l.mu.Lock()
		if err == nil && !l.stopped {
			err = ErrExited
		}
		l.err, l.finished = err, true
		l.mu.Unlock()
		stop()
		abort()
		close(done)
	}()
	return nil
}

// Stop ends the component, bounded by ctx. It returns what the body
// returned when asked to stop; nil when the Life never ran or its body had
// already ended by itself (Err reports that failure); and ctx's error when
// ctx ended before the body returned (the body is then aborted and ends in
// the background).
func (l *Life) Stop(ctx context.Context) error {
	l.mu.Lock()
	ran := l.stop != nil
	l.state = stateStopped
	if !ran || (l.finished && !l.stopped) {
		l.mu.Unlock()
		return nil
	}
	l.stopped = true
	done, stop, abort := l.done, l.stop, l.abort
	l.mu.Unlock()
	stop()
	select {
	case <-done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.err
	case <-ctx.Done():
	}
	abort()
	return ctx.Err()
}

// Done returns a channel closed once the body has returned, whether
// because Stop asked it to or by itself. A Life that never runs never
// closes it.
func (l *Life) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// Err returns what the body returned once it has (ErrExited when it
// returned nil before Stop asked it to), and nil before.
func (l *Life) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
