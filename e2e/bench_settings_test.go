package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

// TestBenchDefaultsAreTheConfigDefaults keeps BenchmarkEndToEnd's
// "defaults" rows honest: they must run with the values a user gets when
// the config sets nothing (internal/config's defaults), or the figures
// describe a configuration nobody runs.
func TestBenchDefaultsAreTheConfigDefaults(t *testing.T) {
	env := map[string]string{"MAILSVC_MAIL_FROM": "Shop <orders@example.com>"}
	c, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	got := benchSettings{name: defaultSettings.name, workers: c.Sender.Workers, sendBatch: c.Sender.BatchSize,
		prefetch: c.AMQP.Prefetch, ingestBatch: c.AMQP.BatchSize, poll: c.Sender.PollInterval}
	require.Equal(t, got, defaultSettings)
	mark := markPerRowSettings
	mark.name, mark.markPerRow = defaultSettings.name, false
	require.Equal(t, defaultSettings, mark, "the mark-per-row baseline differs from the defaults only in marking")
}
