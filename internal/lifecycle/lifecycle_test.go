package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/lifecycle"
)

// waitStop is a body that returns when asked to stop, counting its runs.
func waitStop(runs *atomic.Int64) lifecycle.Func {
	return func(stop, _ context.Context) error {
		runs.Add(1)
		<-stop.Done()
		return nil
	}
}

func TestStartTwiceIsErrStarted(t *testing.T) {
	var l lifecycle.Life
	var runs atomic.Int64
	require.NoError(t, l.Start(context.Background(), waitStop(&runs)))
	require.ErrorIs(t, l.Start(context.Background(), waitStop(&runs)), lifecycle.ErrStarted)
	require.NoError(t, l.Stop(context.Background()))
	require.ErrorIs(t, l.Start(context.Background(), waitStop(&runs)), lifecycle.ErrStarted, "a Life is not restarted")
	require.Equal(t, int64(1), runs.Load())
}

func TestConcurrentStartsRunSetupOnce(t *testing.T) {
	var l lifecycle.Life
	var setups, runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			errs <- l.StartFunc(context.Background(), func(context.Context) (lifecycle.Func, error) {
				setups.Add(1)
				return waitStop(&runs), nil
			})
		})
	}
	wg.Wait()
	close(errs)
	var ok, started int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, lifecycle.ErrStarted):
			started++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, 7, started)
	require.Equal(t, int64(1), setups.Load())
	require.NoError(t, l.Stop(context.Background()))
	require.Equal(t, int64(1), runs.Load())
}

func TestFailedSetupLeavesTheLifeNew(t *testing.T) {
	var l lifecycle.Life
	var runs atomic.Int64
	boom := errors.New("port taken")
	err := l.StartFunc(context.Background(), func(context.Context) (lifecycle.Func, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	require.NoError(t, l.Start(context.Background(), waitStop(&runs)))
	require.NoError(t, l.Stop(context.Background()))
	require.Equal(t, int64(1), runs.Load())
}

func TestStopBeforeStart(t *testing.T) {
	var l lifecycle.Life
	done := l.Done()
	require.NoError(t, l.Stop(context.Background()))
	require.NoError(t, l.Stop(context.Background()), "idempotent")
	var runs atomic.Int64
	require.ErrorIs(t, l.Start(context.Background(), waitStop(&runs)), lifecycle.ErrStarted)
	require.Equal(t, int64(0), runs.Load())
	select {
	case <-done:
		t.Fatal("Done closed for a Life that never ran")
	default:
	}
	require.NoError(t, l.Err())
}

func TestStopIsBoundedByItsContext(t *testing.T) {
	var l lifecycle.Life
	release := make(chan struct{})
	aborted := make(chan struct{})
	require.NoError(t, l.Start(context.Background(), func(stop, abort context.Context) error {
		<-abort.Done() // ignores stop: only an abort ends it
		close(aborted)
		<-release // and then it takes its time
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := l.Stop(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), time.Second, "Stop returned long after its context ended")
	<-aborted
	select {
	case <-l.Done():
		t.Fatal("Done closed before the body returned")
	default:
	}
	close(release)
	<-l.Done()
	require.NoError(t, l.Err(), "a body that returned after Stop did not fail")
}

func TestStopReturnsTheBodysError(t *testing.T) {
	var l lifecycle.Life
	boom := errors.New("shutdown failed")
	require.NoError(t, l.Start(context.Background(), func(stop, _ context.Context) error {
		<-stop.Done()
		return boom
	}))
	require.ErrorIs(t, l.Stop(context.Background()), boom)
	require.ErrorIs(t, l.Stop(context.Background()), boom, "a second Stop returns the same")
}

func TestConcurrentStop(t *testing.T) {
	var l lifecycle.Life
	var runs, stops atomic.Int64
	require.NoError(t, l.Start(context.Background(), func(stop, _ context.Context) error {
		runs.Add(1)
		<-stop.Done()
		stops.Add(1)
		return nil
	}))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() { errs <- l.Stop(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Stop returned before the body did")
	}
	require.Equal(t, int64(1), runs.Load())
	require.Equal(t, int64(1), stops.Load())
}

func TestStartContextGivesValuesOnly(t *testing.T) {
	type key struct{}
	var l lifecycle.Life
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	got := make(chan context.Context, 1)
	require.NoError(t, l.Start(ctx, func(stop, abort context.Context) error {
		got <- stop
		<-stop.Done()
		if abort.Err() != nil {
			return errors.New("a graceful stop aborted")
		}
		return nil
	}))
	stop := <-got
	require.Equal(t, "v", stop.Value(key{}))
	cancel() // a parent's cancellation reaches its children synchronously
	require.NoError(t, stop.Err(), "cancelling Start's context stopped the component")
	require.NoError(t, l.Stop(context.Background()))
}

func TestBodyThatReturnsByItselfFailed(t *testing.T) {
	boom := errors.New("listener closed")
	for _, tc := range []struct {
		name string
		ret  error
		want error
	}{{"error", boom, boom}, {"nil", nil, lifecycle.ErrExited}} {
		t.Run(tc.name, func(t *testing.T) {
			var l lifecycle.Life
			require.NoError(t, l.Start(context.Background(), func(context.Context, context.Context) error { return tc.ret }))
			<-l.Done()
			require.ErrorIs(t, l.Err(), tc.want)
			require.NoError(t, l.Stop(context.Background()), "the failure is Err's to report, not Stop's")
			require.ErrorIs(t, l.Err(), tc.want)
		})
	}
}
