package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

// The providers whose mails are checked for a delivery report, by
// configuration: Resend with its webhook secret, SMTP with success DSNs
// asked and a VERP bounce address, none with the check off.
func TestDeliveryReporters(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verp := map[string]string{"MAILSVC_BOUNCES_ADDRESS": "bounces@bounce.example.com",
		"MAILSVC_BOUNCES_SECRET": "0123456789abcdef0123"}
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"defaults", nil, nil},
		{"resend webhooks", map[string]string{"MAILSVC_WEBHOOKS_RESEND_SECRET": secret}, []string{"resend"}},
		{"verp with the default notify (success asked)", verp, []string{"smtp"}},
		{"verp without success", merge(verp, map[string]string{"MAILSVC_BOUNCES_NOTIFY": "FAILURE,DELAY"}), nil},
		{"success without verp", map[string]string{"MAILSVC_BOUNCES_NOTIFY": "SUCCESS,FAILURE"}, nil},
		{"verp with success", merge(verp, map[string]string{"MAILSVC_BOUNCES_NOTIFY": "FAILURE, SUCCESS"}), []string{"smtp"}},
		{"both", merge(verp, map[string]string{"MAILSVC_BOUNCES_NOTIFY": "SUCCESS", "MAILSVC_WEBHOOKS_RESEND_SECRET": secret}),
			[]string{"smtp", "resend"}},
		{"both but off", merge(verp, map[string]string{"MAILSVC_BOUNCES_NOTIFY": "SUCCESS", "MAILSVC_WEBHOOKS_RESEND_SECRET": secret,
			"MAILSVC_MAIL_DELIVERY_CONFIRM_AFTER": "0s"}), nil},
	} {
		cfg, err := config.Load("", envOf(with(c.env)))
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, cfg.DeliveryReporters(), c.name)
	}
	cfg, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.Equal(t, time.Hour, cfg.Mail.DeliveryConfirmAfter, "the documented default")
	require.False(t, cfg.ReportsDeliveries("mailgun"))
}

// A bad mail.delivery_confirm_after stops the start with a message naming
// the key.
func TestDeliveryConfirmAfterBounds(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{"0s": true, "1m": true, "336h": true, "-1s": false, "30s": false, "337h": false} {
		_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_MAIL_DELIVERY_CONFIRM_AFTER": v})))
		if ok {
			require.NoError(t, err, v)
			continue
		}
		require.ErrorContains(t, err, "mail.delivery_confirm_after: must be 0 (off) or 1m to retention.window (336h0m0s)", v)
	}
}

func merge(a, b map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}
