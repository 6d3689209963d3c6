package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

var valid = map[string]string{"MAILSVC_MAIL_FROM": "Shop <orders@example.com>"}

func with(extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range valid {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestDefaultsAreValidOnceFromIsSet(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/mailsvc?sslmode=disable", c.Database.URL.Reveal())
	require.Equal(t, []string{"order.confirmed", "order.cancelled"}, c.AMQP.BindingKeys)
	require.Equal(t, 24*time.Hour, c.Mail.MaxEventAge)
	require.Equal(t, 336*time.Hour, c.Retention.Window)
	require.Equal(t, "starttls", c.SMTP.TLS)
	require.Equal(t, 587, c.SMTP.Port)
	require.Equal(t, []string{"consumer", "sender", "relay"}, c.Serve.Roles)
	require.Equal(t, "info", c.Log.MailOutcomes)
	require.Equal(t, []time.Duration{500 * time.Millisecond, 2 * time.Second}, []time.Duration{c.AMQP.ReconnectBackoff, c.AMQP.ReconnectBackoffMax},
		"a reconnect meets the broker's return within 2 s")
}

func TestRolesFromTheEnvironment(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", envOf(with(map[string]string{"MAILSVC_SERVE_ROLES": "sender,relay"})))
	require.NoError(t, err)
	require.Equal(t, []string{"sender", "relay"}, c.Serve.Roles)
	require.True(t, c.Serve.HasRole(config.RoleSender))
	require.False(t, c.Serve.HasRole(config.RoleConsumer))
	_, err = config.Load("", envOf(with(map[string]string{"MAILSVC_SERVE_ROLES": "consumer,mailer"})))
	require.ErrorContains(t, err, `serve.roles: unknown role "mailer" (known: consumer, sender, relay)`)
}

func TestEnvOverridesFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("mail:\n  from: a@example.com\nsender:\n  workers: 3\namqp:\n  binding_keys: [x.y]\n"), 0o600))
	c, err := config.Load(path, envOf(map[string]string{"MAILSVC_SENDER_WORKERS": "5", "MAILSVC_AMQP_BINDING_KEYS": "a.b,c.d"}))
	require.NoError(t, err)
	require.Equal(t, 5, c.Sender.Workers)
	require.Equal(t, "a@example.com", c.Mail.From)
	require.Equal(t, []string{"a.b", "c.d"}, c.AMQP.BindingKeys)
}

func TestValidationNamesTheKey(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]string{
		"sender.lease":                  {"MAILSVC_SENDER_LEASE": "1s", "MAILSVC_SENDER_SEND_TIMEOUT": "30s"},
		"retention.window":              {"MAILSVC_RETENTION_WINDOW": "1h"},
		"sender.provider":               {"MAILSVC_SENDER_PROVIDER": "carrier-pigeon"},
		"smtp.tls":                      {"MAILSVC_SMTP_TLS": "maybe"},
		"resend.api_key":                {"MAILSVC_SENDER_PROVIDER": "resend"},
		"sender.ambiguous_policy":       {"MAILSVC_SENDER_AMBIGUOUS_POLICY": "hope"},
		"sender.workers":                {"MAILSVC_SENDER_WORKERS": "0"},
		"templates.time_zone":           {"MAILSVC_TEMPLATES_TIME_ZONE": "Mars/Olympus"},
		"sender.ambiguous_retries":      {"MAILSVC_SENDER_AMBIGUOUS_RETRIES": "-1"},
		"mail.reply_to":                 {"MAILSVC_MAIL_REPLY_TO": "not an address"},
		"mail.idempotency_namespace":    {"MAILSVC_MAIL_IDEMPOTENCY_NAMESPACE": "prod\x01"},
		"smtp.idempotency_header":       {"MAILSVC_SMTP_IDEMPOTENCY_HEADER": "X-A\r\nBcc: v@x.example"},
		"sender.fallback_provider":      {"MAILSVC_SENDER_FALLBACK_PROVIDER": "smtp"},
		"sender.breaker_threshold":      {"MAILSVC_SENDER_BREAKER_THRESHOLD": "0"},
		"sender.quota_probe_interval":   {"MAILSVC_SENDER_QUOTA_PROBE_INTERVAL": "0s"},
		"resend.rate_limit":             {"MAILSVC_RESEND_RATE_LIMIT": "-1"},
		"smtp.rate_limit":               {"MAILSVC_SMTP_RATE_LIMIT": "-0.5"},
		"log.mail_outcomes":             {"MAILSVC_LOG_MAIL_OUTCOMES": "warn"},
		"serve.roles":                   {"MAILSVC_SERVE_ROLES": "consumer,mailer"},
		"mail.recipient_limit":          {"MAILSVC_MAIL_RECIPIENT_LIMIT": "-1"},
		"mail.recipient_limit_window":   {"MAILSVC_MAIL_RECIPIENT_LIMIT_WINDOW": "1500ms"},
		"amqp.url":                      {"MAILSVC_AMQP_URL": "amqps:guest:pw@127.0.0.1/"},
		"amqp.reconnect_backoff_max":    {"MAILSVC_AMQP_RECONNECT_BACKOFF_MAX": "30s"},
		"mail.max_attachment_bytes":     {"MAILSVC_MAIL_MAX_ATTACHMENT_BYTES": "52428800"},
		"attachments.allowed_hosts":     {"MAILSVC_ATTACHMENTS_ALLOWED_HOSTS": "https://invoices.example.com"},
		"attachments.concurrency":       {"MAILSVC_ATTACHMENTS_CONCURRENCY": "0"},
		"attachments.retry_backoff_max": {"MAILSVC_ATTACHMENTS_RETRY_BACKOFF_MAX": "1s"},
	}
	// An empty number is refused, not taken as 0 (which turns the limit off).
	cases["mail.recipient_limit (3)"] = map[string]string{"MAILSVC_MAIL_RECIPIENT_LIMIT": ""}
	for key, env := range map[string]map[string]string{
		// The fallback's own section must be complete.
		"resend.api_key":             {"MAILSVC_SENDER_FALLBACK_PROVIDER": "resend"},
		"sender.fallback_provider":   {"MAILSVC_SENDER_FALLBACK_PROVIDER": "pigeon"},
		"mail.idempotency_namespace": {"MAILSVC_MAIL_IDEMPOTENCY_NAMESPACE": "prod with space"},
		"smtp.idempotency_header":    {"MAILSVC_SMTP_IDEMPOTENCY_HEADER": "From"},
		"serve.roles":                {"MAILSVC_SERVE_ROLES": ""},
		// The per-recipient limit: the database counts in 32-bit integers.
		"mail.recipient_limit":         {"MAILSVC_MAIL_RECIPIENT_LIMIT": "4294967296"},
		"mail.recipient_limit_window":  {"MAILSVC_MAIL_RECIPIENT_LIMIT_WINDOW": "1193046h28m16s"},
		"amqp.url":                     {"MAILSVC_AMQP_URL": "amqp:/guest:pw@127.0.0.1:5672/"},
		"suppression.transient_window": {"MAILSVC_SUPPRESSION_TRANSIENT_WINDOW": "1000000h"},
		"suppression.scope":            {"MAILSVC_SUPPRESSION_SCOPE": "everyone"},
		"suppression.smtp_codes":       {"MAILSVC_SUPPRESSION_SMTP_CODES": "5.1.1,4.2.2"},
		// The latency guard.
		"sender.slow_send_threshold":   {"MAILSVC_SENDER_SLOW_SEND_THRESHOLD": "-1s"},
		"sender.slow_send_window":      {"MAILSVC_SENDER_SLOW_SEND_WINDOW": "0"},
		"sender.slow_send_concurrency": {"MAILSVC_SENDER_SLOW_SEND_CONCURRENCY": "-1"},
	} {
		cases[key+" (2)"] = env
	}
	for key, env := range cases {
		_, err := config.Load("", envOf(with(env)))
		require.Error(t, err, key)
		require.Contains(t, err.Error(), strings.TrimSuffix(strings.TrimSuffix(key, " (2)"), " (3)"))
		require.NotContains(t, err.Error(), ":pw@", key)
	}
	_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_SMTP_IDEMPOTENCY_HEADER": "Resend-Idempotency-Key",
		"MAILSVC_MAIL_IDEMPOTENCY_NAMESPACE": "prod-eu"})))
	require.NoError(t, err, "a valid header name and namespace")
	_, err = config.Load("", envOf(with(map[string]string{"MAILSVC_SENDER_FALLBACK_PROVIDER": "resend",
		"MAILSVC_RESEND_API_KEY": "re_x", "MAILSVC_RESEND_RATE_LIMIT": "10"})))
	require.NoError(t, err, "a fallback with its section")
	_, err = config.Load("", envOf(map[string]string{}))
	require.ErrorContains(t, err, "mail.from")
}

// webhooks.addr turns the listener on and needs the signing secret; each
// mistake names its key, and none prints the secret.
func TestWebhooksConfig(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.Equal(t, webhook.Settings{}, c.Webhooks, "off by default")

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for env, want := range map[string]string{
		"MAILSVC_WEBHOOKS_ADDR=:8081": "webhooks.resend_secret: is required with webhooks.addr",
		"MAILSVC_WEBHOOKS_ADDR=:8081 MAILSVC_WEBHOOKS_RESEND_SECRET=whsec_not*base64":         "webhooks.resend_secret: must be whsec_ followed by base64",
		"MAILSVC_WEBHOOKS_RESEND_SECRET=MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw":                     "webhooks.resend_secret: must be whsec_ followed by base64",
		"MAILSVC_WEBHOOKS_ADDR=127.0.0.1:8080 MAILSVC_WEBHOOKS_RESEND_SECRET=" + secret:       `webhooks.addr: ("127.0.0.1:8080") must differ from http.addr (":8080")`,
		"MAILSVC_WEBHOOKS_ADDR=8081 MAILSVC_WEBHOOKS_RESEND_SECRET=" + secret:                 `webhooks.addr: must be host:port or :port, got "8081"`,
		"MAILSVC_WEBHOOKS_ADDR=:8081 MAILSVC_WEBHOOKS_RESEND_SECRET_FILE=/nonexistent/secret": "webhooks.resend_secret_file: open /nonexistent/secret",
	} {
		kv := map[string]string{}
		for _, pair := range strings.Fields(env) {
			k, v, _ := strings.Cut(pair, "=")
			kv[k] = v
		}
		_, err := config.Load("", envOf(with(kv)))
		require.ErrorContains(t, err, want, env)
		require.NotContains(t, err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "the secret is never shown")
		require.NotContains(t, err.Error(), "not*base64")
	}

	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte(secret+"\n"), 0o600))
	c, err = config.Load("", envOf(with(map[string]string{"MAILSVC_WEBHOOKS_ADDR": "127.0.0.1:8081", "MAILSVC_WEBHOOKS_RESEND_SECRET_FILE": file})))
	require.NoError(t, err)
	require.Equal(t, secret, c.Webhooks.ResendSecret.Reveal())
	out, err := yaml.Marshal(c)
	require.NoError(t, err)
	require.NotContains(t, string(out), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.Contains(t, string(out), "resend_secret: <redacted>")
}

func TestEveryViolationReportedAtOnce(t *testing.T) {
	t.Parallel()
	_, err := config.Load("", envOf(map[string]string{"MAILSVC_SMTP_TLS": "x", "MAILSVC_SENDER_PROVIDER": "y"}))
	require.Error(t, err)
	for _, key := range []string{"mail.from", "smtp.tls", "sender.provider"} {
		require.Contains(t, err.Error(), key)
	}
}

func TestUnknownKeyInFileIsAnError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("mail:\n  from: a@example.com\nsender:\n  wrokers: 3\n"), 0o600))
	_, err := config.Load(path, envOf(nil))
	require.ErrorContains(t, err, "sender.wrokers")
}

func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("re_supersecret123\n"), 0o600))
	c, err := config.Load("", envOf(with(map[string]string{
		"MAILSVC_SMTP_PASSWORD": "hunter2-smtp", "MAILSVC_RESEND_API_KEY_FILE": keyFile,
		"MAILSVC_DATABASE_URL": "postgres://u:dbpass-xyz@h/db",
	})))
	require.NoError(t, err)
	require.Equal(t, "re_supersecret123", c.Resend.APIKey.Reveal())
	out, err := yaml.Marshal(c)
	require.NoError(t, err)
	for _, s := range []string{"hunter2-smtp", "re_supersecret123", "dbpass-xyz"} {
		require.NotContains(t, string(out), s)
	}
	require.True(t, strings.Contains(string(out), "<redacted>"))
}

func TestShippedConfigFilesLoad(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"../../configs/dev.yaml"} {
		_, err := config.Load(f, envOf(nil))
		require.NoError(t, err, f)
	}
	c, err := config.Load("../../configs/mailsvc.yaml", envOf(valid))
	require.NoError(t, err)
	require.Equal(t, 8, c.Sender.Workers)
}

func TestMailsvcYAMLDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../configs/mailsvc.yaml")
	require.NoError(t, err)
	var doc map[string]map[string]any
	require.NoError(t, yaml.Unmarshal(b, &doc))
	for _, k := range config.Keys() {
		sec, name, _ := strings.Cut(k, ".")
		_, ok := doc[sec][name]
		require.True(t, ok, "configs/mailsvc.yaml lacks %s", k)
	}
}

func TestURLHidesEveryFormOfPassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://u:S3cretPW@h:5432/db",
		"host=127.0.0.1 port=1 user=u password=S3cretPW dbname=db",
		"host=h password = 'S3cret PW with \\' quote' dbname=db",
		"postgres://u@h/db?password=S3cretPW&sslmode=disable",
		"postgres://u@h/db?sslmode=verify-full&sslkey=/k.pem&sslpassword=S3cretPW",
		"host=h sslmode=verify-full sslpassword=S3cretPW",
		"host=h password=Pg\\ S3cretRest dbname=db",
		"host=h sslpassword=Key\\ S3cretHalf sslmode=verify-full",
		"amqp://guest:S3cretPW@h:5672/",
	} {
		got := config.URL(raw).String()
		require.NotContains(t, got, "S3cret", raw)
		require.Contains(t, got, "xxxxx", raw)
	}
}

func TestBareNumberIsNotADuration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("mail:\n  from: a@example.com\nsender:\n  send_timeout: 30\n"), 0o600))
	_, err := config.Load(path, envOf(nil))
	require.ErrorContains(t, err, "send_timeout")
	require.ErrorContains(t, err, "no unit")
}

// A bool key takes true or false (or strconv.ParseBool's other words),
// never a number or an empty value, from the file or the environment, and
// the error names the key.
func TestLooseBoolsAreErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("mail:\n  from: a@example.com\nrelay:\n  listen: 2\n"), 0o600))
	_, err := config.Load(path, envOf(nil))
	require.ErrorContains(t, err, "relay.listen")
	require.ErrorContains(t, err, "2 is not true or false")
	for _, v := range []string{"", "2", "yes"} {
		_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_RELAY_LISTEN": v})))
		require.ErrorContains(t, err, "relay.listen", "MAILSVC_RELAY_LISTEN=%q", v)
	}
	for v, want := range map[string]bool{"true": true, "FALSE": false, "1": true, "f": false} {
		c, err := config.Load("", envOf(with(map[string]string{"MAILSVC_HTTP_PPROF": v})))
		require.NoError(t, err, "MAILSVC_HTTP_PPROF=%q", v)
		require.Equal(t, want, c.HTTP.Pprof, "MAILSVC_HTTP_PPROF=%q", v)
	}
	c, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.True(t, c.Relay.Listen, "unset: the default")
}

func TestServeTimeChecksAreConfigChecks(t *testing.T) {
	t.Parallel()
	for key, env := range map[string]map[string]string{
		"http.addr":     {"MAILSVC_HTTP_ADDR": "nonsense"},
		"templates.dir": {"MAILSVC_TEMPLATES_DIR": "/no/such/dir"},
		"database.url":  {"MAILSVC_DATABASE_URL": "mysql://x"},
	} {
		_, err := config.Load("", envOf(with(env)))
		require.ErrorContains(t, err, key)
	}
	_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_DATABASE_URL": "host=h user=u dbname=d"})))
	require.NoError(t, err, "a key=value connection string is valid")
}

func TestLoadReadOnlyNeedsOnlyTheDatabaseURL(t *testing.T) {
	t.Parallel()
	_, err := config.Load("", envOf(nil))
	require.ErrorContains(t, err, "mail.from: is required", "the full config needs mail.from")

	c, err := config.LoadReadOnly("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/mailsvc?sslmode=disable", c.Database.URL.Reveal(), "the default")

	file := filepath.Join(t.TempDir(), "ro.yaml")
	require.NoError(t, os.WriteFile(file, []byte("database:\n  url: postgres://file@db/mailsvc\nsmtp:\n  password_file: /nonexistent/secret\n"), 0o600))
	c, err = config.LoadReadOnly(file, envOf(nil))
	require.NoError(t, err, "secret files are not read")
	require.Equal(t, "postgres://file@db/mailsvc", c.Database.URL.Reveal())
	c, err = config.LoadReadOnly(file, envOf(map[string]string{"MAILSVC_DATABASE_URL": "postgres://env@db/mailsvc"}))
	require.NoError(t, err)
	require.Equal(t, "postgres://env@db/mailsvc", c.Database.URL.Reveal(), "the environment overrides the file")

	_, err = config.LoadReadOnly(file, envOf(map[string]string{"MAILSVC_DATABASE_URL": ""}))
	require.EqualError(t, err, "database.url: is required")
	_, err = config.LoadReadOnly("", envOf(map[string]string{"MAILSVC_DATABASE_URL": "mysql://u:pw-Secret@db/x"}))
	require.EqualError(t, err, "database.url: must be a postgres:// URL or a key=value connection string")
	require.NoError(t, os.WriteFile(file, []byte("database:\n  ulr: x\n"), 0o600))
	_, err = config.LoadReadOnly(file, envOf(nil))
	require.ErrorContains(t, err, "database.ulr: unknown key (config file ")
}
