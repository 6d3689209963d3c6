package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSettingsDefaults: the keys' defaults pass their rules and are what
// a zero Config runs with.
func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	var keys []string
	DefaultSettings().Check(func(key, _ string, _ ...any) { keys = append(keys, key) })
	require.Empty(t, keys)
	mapped := DefaultSettings().Config().WithDefaults()
	own := Config{}.WithDefaults()
	require.Equal(t, own, mapped)
}

// TestSettingsCheckOrder: each broken rule once, under its full key, in a
// fixed order.
func TestSettingsCheckOrder(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	s.MaxAttempts, s.BatchSize, s.LeaseRetry, s.PollInterval, s.Lease = 0, -2, 0, -time.Second, 9*time.Second
	for range 20 {
		var keys []string
		s.Check(func(key, _ string, _ ...any) { keys = append(keys, key) })
		require.Equal(t, []string{"relay.batch_size", "relay.max_attempts", "relay.poll_interval", "relay.lease_retry", "relay.lease_renew"}, keys)
	}
}
