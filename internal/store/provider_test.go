package store_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestSendSlotsAreSpacedAcrossCallers: slots of concurrent callers never
// overlap, are interval apart, start no earlier than now (an idle provider
// earns no burst), and a paused provider grants none but a probe's.
func TestSendSlotsAreSpacedAcrossCallers(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	const interval = 10 * time.Millisecond
	var mu sync.Mutex
	var firsts []time.Time
	var wg sync.WaitGroup
	for range 4 {
		st := sc.Open(t, store.Options{})
		wg.Go(func() {
			for range 5 {
				sl, err := st.TakeSendSlots(ctx, "resend", 3, interval, false)
				require.NoError(t, err)
				require.False(t, sl.First.IsZero())
				require.False(t, sl.First.Before(sl.State.Now.Add(-time.Millisecond)), "never before now")
				mu.Lock()
				firsts = append(firsts, sl.First)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, firsts, 20)
	// Batches of 3 never overlap: sorted, each starts at least 3 slots after
	// the one before.
	slices.SortFunc(firsts, time.Time.Compare)
	for i := 1; i < len(firsts); i++ {
		require.GreaterOrEqual(t, firsts[i].Sub(firsts[i-1]), 3*interval, "batch %d overlaps the one before", i)
	}

	_, err := sc.Store.PauseProvider(ctx, "resend", mailtype.PauseRateLimited, time.Hour, "429")
	require.NoError(t, err)
	sl, err := sc.Store.TakeSendSlots(ctx, "resend", 1, interval, false)
	require.NoError(t, err)
	require.True(t, sl.First.IsZero(), "a paused provider grants no slot")
	require.True(t, sl.State.Paused())
	sl, err = sc.Store.TakeSendSlots(ctx, "resend", 1, interval, true)
	require.NoError(t, err)
	require.False(t, sl.First.IsZero(), "a probe gets its slot")
	other, err := sc.Store.TakeSendSlots(ctx, "smtp", 1, interval, false)
	require.NoError(t, err)
	require.False(t, other.First.IsZero(), "providers are limited and paused apart")
}

// TestPausePrecedence: a pause of higher precedence is never replaced by a
// lower one while it lasts; ends take the later of the two.
func TestPausePrecedence(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	st, err := sc.Store.PauseProvider(ctx, "resend", mailtype.PauseQuota, time.Minute, "daily_quota_exceeded")
	require.NoError(t, err)
	require.Equal(t, mailtype.PauseQuota, st.Reason)
	require.True(t, st.Paused())
	require.InDelta(t, time.Minute.Seconds(), st.PausedUntil.Sub(st.Now).Seconds(), 1)
	pausedAt := st.PausedAt

	st, err = sc.Store.PauseProvider(ctx, "resend", mailtype.PauseRateLimited, time.Hour, "rate_limit_exceeded")
	require.NoError(t, err)
	require.Equal(t, mailtype.PauseQuota, st.Reason, "a rate limit does not replace a quota pause")
	require.Equal(t, "daily_quota_exceeded", st.Error)
	require.InDelta(t, time.Hour.Seconds(), st.PausedUntil.Sub(st.Now).Seconds(), 1, "the later end wins")
	require.Equal(t, pausedAt, st.PausedAt, "the pause began with the first")

	rec, err := sc.Store.ProviderRecovered(ctx, "resend", false)
	require.NoError(t, err)
	require.Equal(t, mailtype.PauseQuota, rec.Reason, "a plain success does not end a quota pause")
	rec, err = sc.Store.ProviderRecovered(ctx, "resend", true)
	require.NoError(t, err)
	require.False(t, rec.Paused())
	require.Equal(t, mailtype.PauseReason(""), rec.Reason)
	require.True(t, rec.PausedUntil.IsZero())

	st, err = sc.Store.PauseProvider(ctx, "resend", mailtype.PauseRateLimited, 200*time.Millisecond, "429")
	require.NoError(t, err)
	require.True(t, st.Paused())
	require.Eventually(t, func() bool {
		s, err := sc.Store.ProviderState(ctx, "resend")
		return err == nil && !s.Paused()
	}, 5*time.Second, 20*time.Millisecond, "a rate-limit pause ends by itself")
}

// TestBreakerTripsOnceAfterConsecutiveFailures: the threshold-th failure
// in a row opens the breaker, exactly once; a success resets the count and
// closes it; one caller per period wins the probe.
func TestBreakerTripsOnceAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for i := 1; i <= 2; i++ {
		st, tripped, err := sc.Store.CountProviderFailure(ctx, "smtp", 3, time.Hour, "auth: 535")
		require.NoError(t, err)
		require.False(t, tripped)
		require.Equal(t, i, st.Failures)
		require.False(t, st.Paused())
	}
	st, err := sc.Store.ProviderRecovered(ctx, "smtp", false)
	require.NoError(t, err)
	require.Zero(t, st.Failures, "a success breaks the run")

	trips := 0
	for range 5 {
		st, tripped, err := sc.Store.CountProviderFailure(ctx, "smtp", 3, 50*time.Millisecond, "auth: 535")
		require.NoError(t, err)
		if tripped {
			trips++
			require.Equal(t, 3, st.Failures)
		}
	}
	require.Equal(t, 1, trips)
	st, err = sc.Store.ProviderState(ctx, "smtp")
	require.NoError(t, err)
	require.Equal(t, mailtype.PauseBreaker, st.Reason)
	require.Equal(t, "auth: 535", st.Error)
	require.True(t, st.Paused())

	require.Eventually(t, func() bool {
		s, err := sc.Store.ProviderState(ctx, "smtp")
		return err == nil && s.ProbeDue()
	}, 5*time.Second, 10*time.Millisecond)
	st, err = sc.Store.ProviderState(ctx, "smtp")
	require.NoError(t, err)
	require.True(t, st.Paused(), "the breaker stays open after its probe time, until a probe succeeds")
	var wins sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 4 {
		wins.Go(func() {
			_, w, err := sc.Store.TakeProbe(ctx, "smtp", "worker-"+string(rune('a'+i)), time.Hour)
			require.NoError(t, err)
			if w {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wins.Wait()
	require.Equal(t, 1, won, "one probe per period")
	st, err = sc.Store.ProviderRecovered(ctx, "smtp", false)
	require.NoError(t, err)
	require.False(t, st.Paused(), "a success closes the breaker")
	require.Zero(t, st.Failures)

	states, err := sc.Store.ProviderStates(ctx)
	require.NoError(t, err)
	require.Len(t, states, 2)
	require.Equal(t, "resend", states[0].Provider)
	require.Equal(t, "smtp", states[1].Provider)
}

// TestProviderStatementsInEveryExecMode: every provider statement works in
// each pgx query exec mode (intervals, booleans and text arrays sent
// without parameter types).
func TestProviderStatementsInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			a, err := st.TakeSendSlots(ctx, "resend", 2, 200*time.Millisecond, false)
			require.NoError(t, err)
			b, err := st.TakeSendSlots(ctx, "resend", 1, 200*time.Millisecond, false)
			require.NoError(t, err)
			require.Equal(t, 400*time.Millisecond, b.First.Sub(a.First))
			_, err = st.PauseProvider(ctx, "resend", mailtype.PauseQuota, time.Millisecond, "it's \\ \"quoted\"")
			require.NoError(t, err)
			_, tripped, err := st.CountProviderFailure(ctx, "resend", 1, time.Millisecond, "x")
			require.NoError(t, err)
			require.True(t, tripped)
			require.Eventually(t, func() bool {
				_, won, err := st.TakeProbe(ctx, "resend", "w", time.Hour)
				require.NoError(t, err)
				return won
			}, 5*time.Second, 5*time.Millisecond)
			rec, err := st.ProviderRecovered(ctx, "resend", true)
			require.NoError(t, err)
			require.False(t, rec.Paused())
			// A provider without a row gets one.
			_, err = st.PauseProvider(ctx, "other", mailtype.PauseRateLimited, time.Second, "")
			require.NoError(t, err)
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM provider_state WHERE provider = 'other' AND pause_reason = 'rate_limited'`))
		})
	}
}

// TestProbesDoubleAsThePauseAges: the next probe of an open breaker comes
// after as long as the pause has lasted, at least ProbeFloor, at most the
// interval asked for; the pause's end is resumed_at.
func TestProbesDoubleAsThePauseAges(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	for _, c := range []struct {
		lasted, next, want time.Duration
	}{
		{0, 30 * time.Second, store.ProbeFloor},
		{5 * time.Second, 30 * time.Second, 5 * time.Second},
		{time.Hour, 30 * time.Second, 30 * time.Second},
		{time.Hour, 200 * time.Millisecond, 200 * time.Millisecond},
	} {
		sc.Exec(t, `UPDATE provider_state SET pause_reason = 'breaker', paused_at = now() - $1::interval,
			paused_until = now() - interval '1 ms' WHERE provider = 'smtp'`, c.lasted)
		st, won, err := sc.Store.TakeProbe(ctx, "smtp", "w", c.next)
		require.NoError(t, err)
		require.True(t, won)
		// The pause's age is read in this statement's transaction, a moment
		// after the UPDATE above set it.
		got := st.PausedUntil.Sub(st.Now)
		require.GreaterOrEqual(t, got, c.want, "paused for %s, probing at most every %s", c.lasted, c.next)
		require.Less(t, got, c.want+500*time.Millisecond, "paused for %s, probing at most every %s", c.lasted, c.next)
	}
	st, err := sc.Store.ProviderRecovered(ctx, "smtp", true)
	require.NoError(t, err)
	require.False(t, st.Paused())
	require.Equal(t, st.Now, st.ResumedAt, "the breaker's end is recorded")
}
