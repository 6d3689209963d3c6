package sender_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

func TestResendOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		faults   []resendtest.Fault
		status   mailtype.Status
		attempts int
		sent     int
		requests int
	}{
		{"lost response then retry sends once", []resendtest.Fault{resendtest.LoseResponse()}, mailtype.StatusSent, 2, 1, 2},
		{"429 twice sends once", []resendtest.Fault{resendtest.RateLimited(1), resendtest.RateLimited(1)}, mailtype.StatusSent, 3, 1, 3},
		{"500 once sends once", []resendtest.Fault{resendtest.ServerError()}, mailtype.StatusSent, 2, 1, 2},
		{"422 fails", []resendtest.Fault{resendtest.Invalid()}, mailtype.StatusFailed, 1, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			api := resendtest.New(t, "re_test")
			api.Inject(c.faults...)
			prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
			require.NoError(t, err)
			id := b.insert(t, "42")
			// The unknown policy does not matter: a live idempotency key
			// makes resending a lost response safe.
			cfg := testConfig()
			cfg.AmbiguousPolicy = mailtype.PolicyUnknown
			start := time.Now()
			b.start(t, cfg, sender.Deps{Provider: prov})

			b.waitRow(t, id, c.status, c.attempts)
			sent := api.Sent()
			require.Len(t, sent, c.sent)
			reqs := api.Requests()
			require.Len(t, reqs, c.requests)
			for _, r := range reqs {
				require.Equal(t, key("42"), r.IdempotencyKey, "one key across attempts")
			}
			for _, s := range sent {
				require.Equal(t, map[string]string{"Message-ID": mailtype.MessageID(key("42"), "example.com")}, s.Headers,
					"the key is an HTTP header, never a mail header")
				require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND provider = 'resend'
					AND provider_message_id = $2`, id, s.ID))
			}
			if c.name == "429 twice sends once" {
				require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "Retry-After is honoured")
			}
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
		})
	}
}

func TestResendAmbiguousAfterTheKeyExpiredIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	api := resendtest.New(t, "re_test")
	api.Inject(resendtest.LoseResponse())
	prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
	require.NoError(t, err)
	id := b.insert(t, "42")
	b.sc.Exec(t, `UPDATE mail SET first_claimed_at = now() - interval '23 hours 30 minutes' WHERE id = $1`, id)
	b.start(t, testConfig(), sender.Deps{Provider: prov})

	b.waitRow(t, id, mailtype.StatusUnknown, 1)
	require.Len(t, api.Sent(), 1)
	require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
}
