package operator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestProviderVerdict(t *testing.T) {
	t.Parallel()
	since := now.Add(-10 * time.Minute)
	for _, c := range []struct {
		name string
		st   store.ProviderState
		want string
	}{
		{"sending", store.ProviderState{Provider: "smtp", Now: now}, "sending"},
		{"failures", store.ProviderState{Provider: "smtp", Failures: 2, Now: now},
			"sending; 2 configuration failures in a row (the breaker opens at sender.breaker_threshold)"},
		{"rate limit over", store.ProviderState{Provider: "resend", Reason: mailtype.PauseRateLimited, PausedUntil: now.Add(-time.Second), Now: now}, "sending"},
		{"rate limited", store.ProviderState{Provider: "resend", Reason: mailtype.PauseRateLimited, PausedAt: since,
			PausedUntil: now.Add(2 * time.Second), Error: "429", Now: now},
			"paused by its rate limit (HTTP 429) since 2026-03-01T11:50:00Z until 2026-03-01T12:00:02Z: mails wait in pending, no attempt spent; 429"},
		{"quota", store.ProviderState{Provider: "resend", Reason: mailtype.PauseQuota, PausedAt: since,
			PausedUntil: now.Add(5 * time.Minute), Error: "daily_quota_exceeded", Now: now},
			"paused: sending quota used up since 2026-03-01T11:50:00Z; next probe at 2026-03-01T12:05:00Z (in 5m0s) (every sender.quota_probe_interval); " +
				"mails wait in pending, no attempt spent; raise the quota, or `mailsvc provider resume resend` once it was raised; daily_quota_exceeded"},
		{"breaker, probe due", store.ProviderState{Provider: "smtp", Reason: mailtype.PauseBreaker, PausedAt: since, Failures: 3,
			PausedUntil: now.Add(-time.Second), Error: "auth: 535", Now: now},
			"paused: circuit breaker open since 2026-03-01T11:50:00Z after 3 configuration failures in a row; next probe due now " +
				"(every sender.breaker_probe_interval); mails wait in pending, no attempt spent; fix the configuration or the provider, " +
				"then wait for the probe or run `mailsvc provider resume smtp`; auth: 535"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, operator.ProviderVerdict(c.st))
		})
	}
	paused := []store.ProviderState{{Provider: "smtp", Reason: mailtype.PauseBreaker, Now: now}, {Provider: "resend", Now: now}}
	require.Len(t, operator.PausedProviders(store.MailView{Status: mailtype.StatusPending}, paused), 1)
	require.Empty(t, operator.PausedProviders(store.MailView{Status: mailtype.StatusSent}, paused), "a finished mail waits for nothing")
}
