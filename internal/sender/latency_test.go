package sender

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLatencyGuardJudgesTheP90OfTheWindow drives the guard with durations
// alone: it judges from five sends, engages when the p90 of the window
// passes the threshold, and lifts only when the p90 is under 80 % of it.
func TestLatencyGuardJudgesTheP90OfTheWindow(t *testing.T) {
	t.Parallel()
	l := newLatency(Config{SlowSendThreshold: time.Second, SlowSendWindow: 10, SlowSendConcurrency: 2})
	ms := time.Millisecond
	for range 4 {
		p90, slow, changed := l.record(3 * time.Second)
		require.Equal(t, [3]any{time.Duration(0), false, false}, [3]any{p90, slow, changed}, "fewer than five sends: no verdict")
	}
	p90, slow, changed := l.record(3 * time.Second)
	require.Equal(t, [3]any{3 * time.Second, true, true}, [3]any{p90, slow, changed})
	for range 5 {
		_, slow, _ = l.record(100 * ms)
	}
	require.True(t, slow, "half the window still slow: the p90 is a slow send")
	for range 4 {
		_, slow, _ = l.record(900 * ms)
	}
	require.True(t, slow, "one slow send in ten and nine at 900ms: p90 900ms, over 80% of the threshold")
	p90, slow, changed = l.record(100 * ms)
	require.Equal(t, [3]any{900 * ms, true, false}, [3]any{p90, slow, changed})
	for i := range 7 {
		_, slow, _ = l.record(100 * ms)
		require.True(t, slow, "send %d: two 900ms sends or more left in the window keep the p90 at 900ms", i)
	}
	p90, slow, changed = l.record(100 * ms)
	require.Equal(t, [3]any{100 * ms, false, true}, [3]any{p90, slow, changed}, "one 900ms send left: p90 100ms lifts the guard")
}

// TestLatencyGuardAdmitsAtMostItsLimitWhileSlow: a fast provider admits
// every send; a slow one no more than the limit at once, counting the
// sends admitted before it turned slow.
func TestLatencyGuardAdmitsAtMostItsLimitWhileSlow(t *testing.T) {
	t.Parallel()
	l := newLatency(Config{SlowSendThreshold: time.Second, SlowSendWindow: 5, SlowSendConcurrency: 2})
	for range 3 {
		require.True(t, l.admit(2))
	}
	for range 5 {
		l.record(2 * time.Second)
	}
	require.True(t, l.engaged())
	require.False(t, l.admit(2), "three in flight, limit two")
	l.done()
	require.False(t, l.admit(2), "two in flight")
	l.done()
	require.True(t, l.admit(2))
	require.False(t, l.admit(1), "the fallback's rule: one at a time")
}

// TestLatencyGuardOff: a zero threshold (NoSlowSendGuard after
// WithDefaults) never engages.
func TestLatencyGuardOff(t *testing.T) {
	t.Parallel()
	cfg := Config{SlowSendThreshold: NoSlowSendGuard, From: "a@example.com"}.WithDefaults()
	require.NoError(t, cfg.Validate())
	l := newLatency(cfg)
	for range 30 {
		_, slow, _ := l.record(time.Minute)
		require.False(t, slow)
	}
	p90, _, _ := l.record(time.Minute)
	require.Equal(t, time.Minute, p90, "the p90 is still measured for the dashboard")
	require.Equal(t, 2, slowLimit(Config{Workers: 8}, true), "default with a fallback: a quarter of the workers")
	require.Equal(t, 1, slowLimit(Config{Workers: 2}, true), "at least one")
	require.Equal(t, 8, slowLimit(Config{Workers: 8}, false), "default without a fallback: no limit, the guard only reports")
	require.Equal(t, 3, slowLimit(Config{Workers: 8, SlowSendConcurrency: 3}, false), "a limit set is a limit kept")
}

// TestLatencyGuardMeasuresSendsThatReachedTheProvider: a refused session
// or one that could not be opened says nothing about the provider's speed,
// nor does a send cut by the shutdown.
func TestLatencyGuardMeasuresSendsThatReachedTheProvider(t *testing.T) {
	t.Parallel()
	require.True(t, measured(nil, false))
	require.True(t, measured(errors.New("451 try later"), false))
	require.False(t, measured(nil, true))
	require.False(t, measured(&ProviderError{Trouble: TroubleBusy, Err: errors.New("421")}, false))
	require.False(t, measured(&ProviderError{Trouble: TroubleConfig, Err: errors.New("refused")}, false))
}

// TestSlowSendConfigNamesTheKey: invalid guard settings name their key.
func TestSlowSendConfigNamesTheKey(t *testing.T) {
	t.Parallel()
	cfg := Config{From: "a@example.com", SlowSendThreshold: -2 * time.Second, SlowSendWindow: -1, SlowSendConcurrency: -3}.WithDefaults()
	err := cfg.Validate()
	require.ErrorContains(t, err, "sender.slow_send_threshold: must be >= 0 (0 means no latency guard), got -2s")
	require.ErrorContains(t, err, "sender.slow_send_window: must be positive, got -1")
	require.ErrorContains(t, err, "sender.slow_send_concurrency: must be >= 0 (0: a quarter of the workers with a fallback provider, no limit without one), got -3")
}
