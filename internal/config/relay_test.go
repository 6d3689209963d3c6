package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

func TestRelayLeaseKeys(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.True(t, c.Relay.Listen)
	require.Equal(t, 15*time.Second, c.Relay.Lease)
	require.Equal(t, 5*time.Second, c.Relay.LeaseRenew)
	require.Equal(t, 2*time.Second, c.Relay.LeaseRetry)

	c, err = config.Load("", envOf(with(map[string]string{
		"MAILSVC_RELAY_LISTEN": "false", "MAILSVC_RELAY_LEASE": "6s", "MAILSVC_RELAY_LEASE_RENEW": "2s", "MAILSVC_RELAY_LEASE_RETRY": "1s",
	})))
	require.NoError(t, err)
	require.False(t, c.Relay.Listen)
	require.Equal(t, 6*time.Second, c.Relay.Lease)
	require.Equal(t, 2*time.Second, c.Relay.LeaseRenew)
	require.Equal(t, time.Second, c.Relay.LeaseRetry)

	for key, env := range map[string]map[string]string{
		"relay.lease_renew": {"MAILSVC_RELAY_LEASE_RENEW": "6s"}, // more than a third of 15s
		"relay.lease":       {"MAILSVC_RELAY_LEASE": "0s"},
		"relay.lease_retry": {"MAILSVC_RELAY_LEASE_RETRY": "0s"},
	} {
		_, err := config.Load("", envOf(with(env)))
		require.Error(t, err, key)
		require.Contains(t, err.Error(), key+":")
	}
}
