package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestProviderStatusAndResume: what an operator sees while a provider is
// paused (provider status, mail show of a waiting mail), and the resume
// that ends the pause for every replica.
func TestProviderStatusAndResume(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:42", "42", mailtype.StatusPending)
	_, err := o.sc.Store.PauseProvider(t.Context(), "resend", mailtype.PauseQuota, time.Hour, "rate_limited (transient): daily_quota_exceeded")
	require.NoError(t, err)

	out, err := o.run(t, "provider", "status")
	require.NoError(t, err)
	require.Contains(t, out, "resend:  paused: sending quota used up since ")
	require.Contains(t, out, "next probe at ")
	require.Contains(t, out, "mailsvc provider resume resend")
	require.Contains(t, out, "daily_quota_exceeded")
	require.Contains(t, out, "smtp:    sending\n")

	out, err = o.run(t, "mail", "show", "order-confirmed:42")
	require.NoError(t, err)
	require.Contains(t, out, "provider resend:")
	require.Contains(t, out, "mails wait in pending, no attempt spent")

	out, err = o.run(t, "provider", "status", "--json")
	require.NoError(t, err)
	var states []providerJSON
	require.NoError(t, json.Unmarshal([]byte(out), &states))
	require.Len(t, states, 2)
	require.Equal(t, "resend", states[0].Provider)
	require.True(t, states[0].Paused)
	require.Equal(t, "quota", states[0].Reason)
	require.False(t, states[1].Paused)

	out, err = o.run(t, "provider", "resume", "resend")
	require.NoError(t, err)
	require.Equal(t, "resend: sending\n", out)
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM provider_state WHERE provider = 'resend' AND pause_reason IS NULL`))
	out, err = o.run(t, "mail", "show", "order-confirmed:42")
	require.NoError(t, err)
	require.NotContains(t, out, "provider resend:")

	_, err = o.run(t, "provider", "resume", "pigeon")
	var ee *ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, ExitNotFound, ee.Code)
}
