package sender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func checkKeys(s Settings) []string {
	var keys []string
	s.Check(func(key, _ string, _ ...any) { keys = append(keys, key) })
	return keys
}

// TestSettingsDefaultsAreThePoolsDefaults: the keys' defaults pass their
// rules, and the pool given them runs with them unchanged (its
// WithDefaults takes the same values for a zero Config).
func TestSettingsDefaultsAreThePoolsDefaults(t *testing.T) {
	t.Parallel()
	d := DefaultSettings()
	require.Empty(t, checkKeys(d))
	mapped := d.Config()
	own := Config{}.WithDefaults()
	eff := mapped.WithDefaults()
	eff.WorkerID, eff.DBTimeout = mapped.WorkerID, mapped.DBTimeout // no key: the pool's own
	require.Equal(t, mapped, eff, "WithDefaults changed a field a key sets")
	own.WorkerID, own.DBTimeout = mapped.WorkerID, mapped.DBTimeout
	own.PriorityWeight = mapped.PriorityWeight // 0 is strict priority in code; the key's default is 4
	own.OutcomeLinger = mapped.OutcomeLinger   // no key: the daemon lingers, a Config built in code does not
	require.Equal(t, mapped, own, "a zero Config runs with the keys' defaults")
}

// TestSettingsCheckOrderAndKeys: every broken rule is reported once,
// under its full key, in the same order each time.
func TestSettingsCheckOrderAndKeys(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	s.Provider, s.FallbackProvider = "pigeon", "owl"
	s.Workers, s.BatchSize, s.MaxAttempts = 0, -1, 0
	s.BreakerThreshold, s.BreakerProbeInterval, s.QuotaProbeInterval = 0, 0, -time.Second
	s.SlowSendThreshold, s.SlowSendWindow, s.SlowSendConcurrency, s.PriorityWeight = -time.Nanosecond, 1001, -1, 101
	s.AmbiguousRetries, s.RateLimit, s.Lease = -1, -1, 35*time.Second
	want := []string{
		"sender.provider", "sender.fallback_provider", "sender.ambiguous_retries", "sender.slow_send_threshold",
		"sender.workers", "sender.batch_size", "sender.max_attempts", "sender.lease", "sender.rate_limit",
		"sender.breaker_threshold", "sender.breaker_probe_interval", "sender.quota_probe_interval",
		"sender.slow_send_window", "sender.slow_send_concurrency", "sender.priority_weight",
	}
	for range 20 {
		require.Equal(t, want, checkKeys(s))
	}
	c := s.Config()
	c.From, c.Lease, c.SlowSendThreshold = "a@example.com", time.Hour, 0
	var got []string
	c.checkShared(func(key, _ string, _ ...any) { got = append(got, key) }, 0)
	require.NotContains(t, got, "sender.lease", "in code the lease need only exceed the send timeout")
}
