package config_test

import (
	"os"
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

// TestUnknownKeysComeSortedUnderTheirKeys: a file with several misspelled
// keys names every one, each line starting with the key, in one order
// however often it is loaded (viper hands its keys over from a map).
func TestUnknownKeysComeSortedUnderTheirKeys(t *testing.T) {
	file := t.TempDir() + "/mailsvc.yaml"
	body := "smtp:\n  hots: x\n  prot: 25\nsender:\n  workerz: 3\n  batchsize: 9\nmail:\n  frm: x\namqp:\n  urll: x\n"
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	want := strings.Join([]string{
		"amqp.urll: unknown key (config file " + file + ")",
		"mail.frm: unknown key (config file " + file + ")",
		"sender.batchsize: unknown key (config file " + file + ")",
		"sender.workerz: unknown key (config file " + file + ")",
		"smtp.hots: unknown key (config file " + file + ")",
		"smtp.prot: unknown key (config file " + file + ")",
	}, "\n")
	for range 20 {
		_, err := config.Load(file, envOf(valid))
		require.EqualError(t, err, want)
	}
}

// TestPrefetchAbove16BitsIsRefused: basic.qos carries the prefetch count
// in 16 bits, so 65536 would reach RabbitMQ as 0, unlimited.
func TestPrefetchAbove16BitsIsRefused(t *testing.T) {
	_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_AMQP_PREFETCH": "65536"})))
	require.EqualError(t, err, "amqp.prefetch: (65536) must be at most 65535 (AMQP's prefetch count is 16 bits: more wraps around, 65536 to unlimited)")
	_, err = config.Load("", envOf(with(map[string]string{"MAILSVC_AMQP_PREFETCH": "65535"})))
	require.NoError(t, err)
}

// TestListItemsFromTheEnvironmentAreTrimmed: a comma and a space between
// the items of a list in a variable separate them; the space is not part
// of the next item (a binding key " order.cancelled" matches nothing).
func TestListItemsFromTheEnvironmentAreTrimmed(t *testing.T) {
	c, err := config.Load("", envOf(with(map[string]string{"MAILSVC_AMQP_BINDING_KEYS": "order.confirmed, order.cancelled "})))
	require.NoError(t, err)
	require.Equal(t, []string{"order.confirmed", "order.cancelled"}, c.AMQP.BindingKeys)
}

// TestConfigCheckReadsTheAttachmentAndBounceTLSFiles: the attachment
// stage's CA file and the bounce listener's certificate are read at load,
// as serve reads them, so `config check` refuses what serve would.
func TestConfigCheckReadsTheAttachmentAndBounceTLSFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := config.Load("", envOf(with(map[string]string{
		"MAILSVC_ATTACHMENTS_ALLOWED_HOSTS": "files.example.com",
		"MAILSVC_ATTACHMENTS_TLS_CA_FILE":   dir + "/ca.pem",
	})))
	require.EqualError(t, err, "attachments.tls_ca_file: open "+dir+"/ca.pem: no such file or directory")

	require.NoError(t, os.WriteFile(dir+"/cert.pem", []byte("not a certificate"), 0o600))
	require.NoError(t, os.WriteFile(dir+"/key.pem", []byte("not a key"), 0o600))
	_, err = config.Load("", envOf(with(map[string]string{
		"MAILSVC_BOUNCES_TLS_CERT_FILE": dir + "/cert.pem",
		"MAILSVC_BOUNCES_TLS_KEY_FILE":  dir + "/key.pem",
	})))
	require.ErrorContains(t, err, "bounces.tls_cert_file, bounces.tls_key_file: tls: failed to find any PEM data in certificate input")
}
