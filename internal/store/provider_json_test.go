package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestProviderStateJSON(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	js, err := json.Marshal(store.ProviderState{Provider: "smtp", Now: now})
	require.NoError(t, err)
	require.JSONEq(t, `{"provider": "smtp", "failures": 0, "now": "2026-12-06T10:00:00Z"}`, string(js), "zero times left out")

	js, err = json.Marshal(store.ProviderState{Provider: "resend", Reason: mailtype.PauseQuota, PausedAt: now,
		PausedUntil: now.Add(time.Hour), Error: "quota", Failures: 2, ProbeBy: "w1", ResumedAt: now.Add(-time.Hour), Now: now})
	require.NoError(t, err)
	require.JSONEq(t, `{"provider": "resend", "reason": "quota", "paused_at": "2026-12-06T10:00:00Z",
		"paused_until": "2026-12-06T11:00:00Z", "error": "quota", "failures": 2, "probe_by": "w1",
		"resumed_at": "2026-12-06T09:00:00Z", "now": "2026-12-06T10:00:00Z"}`, string(js))
}
