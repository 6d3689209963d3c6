package config_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

// manyWrong breaks rules of every section at once, among them the keys
// that map-ranging loops used to check in a random order.
var manyWrong = map[string]string{
	"MAILSVC_MAIL_FROM":                             "Shop <orders@example.com>",
	"MAILSVC_AMQP_QUEUE":                            "",
	"MAILSVC_AMQP_INPUT_EXCHANGE":                   "",
	"MAILSVC_AMQP_DEAD_LETTER_QUEUE":                "",
	"MAILSVC_AMQP_PREFETCH":                         "0",
	"MAILSVC_AMQP_RECONNECT_BACKOFF":                "0s",
	"MAILSVC_SENDER_WORKERS":                        "0",
	"MAILSVC_SENDER_MAX_ATTEMPTS":                   "0",
	"MAILSVC_SENDER_BREAKER_THRESHOLD":              "0",
	"MAILSVC_SENDER_BREAKER_PROBE_INTERVAL":         "0s",
	"MAILSVC_SENDER_QUOTA_PROBE_INTERVAL":           "0s",
	"MAILSVC_SENDER_POLL_INTERVAL":                  "0s",
	"MAILSVC_SENDER_SHUTDOWN_TIMEOUT":               "0s",
	"MAILSVC_RELAY_POLL_INTERVAL":                   "0s",
	"MAILSVC_RELAY_LEASE_RETRY":                     "0s",
	"MAILSVC_RELAY_BATCH_SIZE":                      "0",
	"MAILSVC_SUPPRESSION_TRANSIENT_WINDOW":          "9000h",
	"MAILSVC_SUPPRESSION_TRANSIENT_EXPIRY":          "9000h",
	"MAILSVC_ATTACHMENTS_TIMEOUT":                   "0s",
	"MAILSVC_ATTACHMENTS_POLL_INTERVAL":             "0s",
	"MAILSVC_CONSOLE_TRUSTED_PROXY_ROLE_HEADER":     "X-Groups",
	"MAILSVC_CONSOLE_TRUSTED_PROXY_DEFAULT_ROLE":    "operator",
	"MAILSVC_CONSOLE_TRUSTED_PROXY_OPERATOR_GROUPS": "ops",
}

var fullKey = regexp.MustCompile(`^[a-z]+\.[a-z_0-9]+(\[[0-9]+\])?: `)

// TestValidateOrderIsStable: the same configuration gives the same errors
// in the same order every time, each starting with its full key.
func TestValidateOrderIsStable(t *testing.T) {
	t.Parallel()
	_, err := config.Load("", envOf(manyWrong))
	require.Error(t, err)
	first := err.Error()
	lines := strings.Split(first, "\n")
	var keys []string
	for _, l := range lines {
		require.Regexp(t, fullKey, l)
		k, _, _ := strings.Cut(l, ":")
		keys = append(keys, k)
	}
	for range 50 {
		_, err := config.Load("", envOf(manyWrong))
		require.EqualError(t, err, first, "the order of the errors changed")
	}
	require.Equal(t, []string{
		"amqp.input_exchange", "amqp.queue", "amqp.dead_letter_queue", "amqp.prefetch", "amqp.batch_size",
		"sender.poll_interval", "sender.shutdown_timeout", "sender.workers", "sender.max_attempts",
		"sender.breaker_threshold", "sender.breaker_probe_interval", "sender.quota_probe_interval",
		"relay.batch_size", "relay.poll_interval", "relay.lease_retry",
		"amqp.reconnect_backoff",
		"console.trusted_proxy_role_header", "console.trusted_proxy_operator_groups", "console.trusted_proxy_default_role",
		"attachments.timeout", "attachments.poll_interval",
		"suppression.transient_window", "suppression.transient_expiry",
	}, keys)
}
