package e2e

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// TestBenchDefaultsAreTheConfigDefaults keeps BenchmarkEndToEnd's
// "defaults" rows honest: they must run with the values a user gets when
// the config sets nothing (what `mailsvc config check` prints with only
// mail.from set), or the figures describe a configuration nobody runs.
func TestBenchDefaultsAreTheConfigDefaults(t *testing.T) {
	testenv.NeedsServer(t, "the mailsvc binary that TestMain builds")
	cmd := exec.Command(binPath, "config", "check")
	cmd.Env = []string{"MAILSVC_MAIL_FROM=Shop <orders@example.com>"}
	out, err := cmd.Output()
	require.NoError(t, err, "mailsvc config check: %s", out)
	var c struct {
		AMQP struct {
			Prefetch  int `yaml:"prefetch"`
			BatchSize int `yaml:"batch_size"`
		} `yaml:"amqp"`
		Sender struct {
			Workers      int    `yaml:"workers"`
			BatchSize    int    `yaml:"batch_size"`
			PollInterval string `yaml:"poll_interval"`
		} `yaml:"sender"`
	}
	require.NoError(t, yaml.Unmarshal(out, &c), "%s", out)
	poll, err := time.ParseDuration(c.Sender.PollInterval)
	require.NoError(t, err)
	got := benchSettings{name: defaultSettings.name, workers: c.Sender.Workers, sendBatch: c.Sender.BatchSize,
		prefetch: c.AMQP.Prefetch, ingestBatch: c.AMQP.BatchSize, poll: poll}
	require.Equal(t, got, defaultSettings)
	mark := markPerRowSettings
	mark.name, mark.markPerRow = defaultSettings.name, false
	require.Equal(t, defaultSettings, mark, "the mark-per-row baseline differs from the defaults only in marking")
	floor := floorSettings
	require.True(t, floor.render, "the floor's mails are mailsvc's rendered mails")
	floor.name, floor.render, floor.feedback = recordedLogSettings.name, false, false
	require.Equal(t, recordedLogSettings, floor,
		"the floor differs from the recorded-log baseline only in its rendered mails and feedback events")
}
