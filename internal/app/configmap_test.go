package app

import (
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
	"github.com/mailsvc/mailsvc/internal/webhook"
)

const documented = "../../configs/mailsvc.yaml"

// onlyFrom is the one key without a default (mail.from is required).
func onlyFrom(k string) (string, bool) {
	if k == "MAILSVC_MAIL_FROM" {
		return "Shop <orders@shop.example>", true
	}
	return "", false
}

// flatten lists the dotted keys of a YAML document.
func flatten(prefix string, m map[string]any, out map[string]bool) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			flatten(prefix+k+".", sub, out)
			continue
		}
		out[prefix+k] = true
	}
}

// TestDocumentedDefaultsAreEffective: configs/mailsvc.yaml documents every
// key with its default; loading it gives exactly the built-in defaults,
// and each component, given the mapping of those defaults, runs with them
// unchanged (its WithDefaults touches no field a key sets) and would pick
// the same values by itself from a zero Config.
func TestDocumentedDefaultsAreEffective(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(documented)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(b, &doc))
	keys := map[string]bool{}
	flatten("", doc, keys)
	require.Equal(t, config.Keys(), slices.Sorted(maps.Keys(keys)), "the file documents every key, and no other")

	fromFile, err := config.Load(documented, onlyFrom)
	require.NoError(t, err)
	builtIn, err := config.Load("", onlyFrom)
	require.NoError(t, err)
	require.Equal(t, builtIn, fromFile, "a documented default differs from the built-in one")
	cfg := builtIn

	t.Run("consumer", func(t *testing.T) {
		mapped := ConsumerConfig(cfg)
		eff := mapped.WithDefaults()
		// No key: the consumer's own.
		eff.MaxInFlight, eff.RetryBackoff, eff.RetryBackoffMax = mapped.MaxInFlight, mapped.RetryBackoff, mapped.RetryBackoffMax
		eff.StatementTimeout, eff.ConfirmTimeout, eff.HoldBackoffMax = mapped.StatementTimeout, mapped.ConfirmTimeout, mapped.HoldBackoffMax
		require.Equal(t, mapped, eff, "WithDefaults changed a field a key sets")
		own := consumer.Config{}.WithDefaults()
		for name, pair := range map[string][2]any{
			"amqp.prefetch":                     {mapped.Prefetch, own.Prefetch},
			"amqp.batch_size":                   {mapped.BatchSize, own.BatchSize},
			"amqp.delivery_limit":               {mapped.DeliveryLimit, own.DeliveryLimit},
			"amqp.max_message_bytes":            {mapped.MaxMessageBytes, own.MaxMessageBytes},
			"amqp.reconnect_backoff":            {mapped.ReconnectBackoff, own.ReconnectBackoff},
			"amqp.reconnect_backoff_max":        {mapped.ReconnectBackoffMax, own.ReconnectBackoffMax},
			"mail.max_event_age":                {mapped.MaxEventAge, own.MaxEventAge},
			"amqp.max_queue_length":             {mapped.MaxQueueLength, own.MaxQueueLength},
			"amqp.max_dead_letter_queue_length": {mapped.MaxDeadLetterQueueLength, own.MaxDeadLetterQueueLength},
			"amqp.queue_limits":                 {mapped.LimitsByPolicy, own.LimitsByPolicy},
		} {
			require.Equal(t, pair[0], pair[1], name)
		}
	})
	t.Run("sender", func(t *testing.T) {
		mapped := senderConfig(cfg)
		eff := mapped.WithDefaults()
		eff.WorkerID, eff.DBTimeout = mapped.WorkerID, mapped.DBTimeout // no key: the pool's own
		require.Equal(t, mapped, eff, "WithDefaults changed a field a key sets")
		own := sender.Config{}.WithDefaults()
		for name, pair := range map[string][2]any{
			"sender.workers":                {mapped.Workers, own.Workers},
			"sender.batch_size":             {mapped.BatchSize, own.BatchSize},
			"sender.lease":                  {mapped.Lease, own.Lease},
			"sender.send_timeout":           {mapped.SendTimeout, own.SendTimeout},
			"sender.max_attempts":           {mapped.MaxAttempts, own.MaxAttempts},
			"sender.ambiguous_policy":       {mapped.AmbiguousPolicy, own.AmbiguousPolicy},
			"sender.ambiguous_retries":      {mapped.AmbiguousRetries, own.AmbiguousRetries},
			"sender.retry_backoff":          {mapped.RetryBackoff, own.RetryBackoff},
			"sender.retry_backoff_max":      {mapped.RetryBackoffMax, own.RetryBackoffMax},
			"sender.rate_limit":             {mapped.RateLimit, own.RateLimit},
			"sender.poll_interval":          {mapped.PollInterval, own.PollInterval},
			"sender.shutdown_timeout":       {mapped.ShutdownTimeout, own.ShutdownTimeout},
			"sender.breaker_threshold":      {mapped.BreakerThreshold, own.BreakerThreshold},
			"sender.breaker_probe_interval": {mapped.BreakerProbe, own.BreakerProbe},
			"sender.quota_probe_interval":   {mapped.QuotaProbe, own.QuotaProbe},
			"sender.slow_send_threshold":    {mapped.SlowSendThreshold, own.SlowSendThreshold},
			"sender.slow_send_window":       {mapped.SlowSendWindow, own.SlowSendWindow},
			"sender.slow_send_concurrency":  {mapped.SlowSendConcurrency, own.SlowSendConcurrency},
		} {
			require.Equal(t, pair[0], pair[1], name)
		}
		require.Equal(t, map[string]float64{"smtp": 0, "resend": config.ResendDefaultRateLimit}, mapped.RateLimits,
			"smtp.rate_limit none, resend.rate_limit Resend's documented default")
		require.Empty(t, cfg.Sender.FallbackProvider)
		jan := janitorConfig(cfg)
		require.Equal(t, 30*time.Second, jan.Interval, "a quarter of sender.lease, at most 30s")
		require.Equal(t, cfg.Retention.Window, jan.RetentionWindow)
	})
	t.Run("relay", func(t *testing.T) {
		mapped := relayConfig(cfg)
		eff := mapped.WithDefaults()
		own := relay.Config{}.WithDefaults()
		for name, v := range map[string][3]any{
			"relay.batch_size":        {eff.BatchSize, mapped.BatchSize, own.BatchSize},
			"relay.poll_interval":     {eff.PollInterval, mapped.PollInterval, own.PollInterval},
			"relay.confirm_timeout":   {eff.ConfirmTimeout, mapped.ConfirmTimeout, own.ConfirmTimeout},
			"relay.max_attempts":      {eff.MaxAttempts, mapped.MaxAttempts, own.MaxAttempts},
			"relay.lease":             {eff.Lease, mapped.Lease, own.Lease},
			"relay.lease_renew":       {eff.LeaseRenew, mapped.LeaseRenew, own.LeaseRenew},
			"relay.lease_retry":       {eff.LeaseRetry, mapped.LeaseRetry, own.LeaseRetry},
			"relay.listen":            {!eff.DisableListen, !mapped.DisableListen, !own.DisableListen},
			"relay.unroutable_window": {eff.UnroutableWindow, mapped.UnroutableWindow, own.UnroutableWindow},
		} {
			require.Equal(t, v[0], v[1], "%s: WithDefaults changed a field a key sets", name)
			require.Equal(t, v[1], v[2], "%s: the relay's own default differs", name)
		}
		require.Equal(t, cfg.Retention.Window, eff.RetentionWindow)
		require.NoError(t, eff.Validate())
	})
	t.Run("webhooks", func(t *testing.T) {
		mapped := webhookConfig(cfg)
		require.Equal(t, webhook.Config{RetentionWindow: cfg.Retention.Window}, mapped, "off by default: no address, no secret")
		eff := mapped.WithDefaults()
		require.Equal(t, mapped.RetentionWindow, eff.RetentionWindow, "WithDefaults changed a field a key sets")
	})
	t.Run("delivery confirm", func(t *testing.T) {
		rule := DeliveryConfirm(cfg)
		require.Equal(t, store.DeliveryConfirm{After: config.DefaultDeliveryConfirmAfter}, rule,
			"mail.delivery_confirm_after; by default no provider reports deliveries (no webhook secret, no VERP)")
		require.False(t, rule.On())
		require.Equal(t, config.Providers, stats.Providers, "the gauges are pre-set for every provider")
	})
	t.Run("smtp and templates", func(t *testing.T) {
		s := smtpConfig(cfg)
		require.Equal(t, "starttls", s.TLS, "smtp.tls; smtp.New's own default")
		require.Equal(t, cfg.Sender.SendTimeout, s.PhaseTimeout)
		require.Equal(t, "https://api.resend.com/", resendConfig(cfg).BaseURL, "resend.base_url; resend.New's own default")
		_, err := templates.New(TemplatesOptions(cfg))
		require.NoError(t, err)
	})
}

// The relay's lease keys reach the relay, which checks their relation.
func TestRelayConfigMapsTheLeaseKeys(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", func(k string) (string, bool) {
		v, ok := map[string]string{
			"MAILSVC_MAIL_FROM": "a@example.com", "MAILSVC_RELAY_LISTEN": "false",
			"MAILSVC_RELAY_LEASE": "9s", "MAILSVC_RELAY_LEASE_RENEW": "3s", "MAILSVC_RELAY_LEASE_RETRY": "1s",
		}[k]
		return v, ok
	})
	require.NoError(t, err)
	rc := relayConfig(c).WithDefaults()
	require.True(t, rc.DisableListen)
	require.Equal(t, 9*time.Second, rc.Lease)
	require.Equal(t, 3*time.Second, rc.LeaseRenew)
	require.Equal(t, time.Second, rc.LeaseRetry)
	require.NoError(t, rc.Validate())
	rc.LeaseRenew = 4 * time.Second
	require.ErrorContains(t, rc.Validate(), "LeaseRenew")
}

// The latency guard's keys reach the pool: 0 turns the guard off (the
// pool's zero is its default), and a concurrency of 0 is a quarter of the
// workers.
func TestSenderConfigMapsTheLatencyGuard(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", func(k string) (string, bool) {
		v, ok := map[string]string{
			"MAILSVC_MAIL_FROM": "a@example.com", "MAILSVC_SENDER_SLOW_SEND_THRESHOLD": "0s",
			"MAILSVC_SENDER_WORKERS": "12", "MAILSVC_SENDER_SLOW_SEND_WINDOW": "50",
		}[k]
		return v, ok
	})
	require.NoError(t, err)
	sc := senderConfig(c).WithDefaults()
	require.Equal(t, sender.NoSlowSendGuard, int(sc.SlowSendThreshold))
	require.Equal(t, 50, sc.SlowSendWindow)
	require.Equal(t, 0, sc.SlowSendConcurrency, "by the providers: a quarter of the workers with a fallback, no limit without one")
	require.NoError(t, sc.Validate())
}
