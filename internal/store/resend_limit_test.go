package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// A resend counts against the per-recipient safety limit as a new mail
// does: with two mails in a window allowed (30 days, so that the test
// never straddles two windows), the third resend to one address
// (the copies sent in between) is refused, dry or not, and the refusal
// leaves the window's count as it was.
func TestResendKeepsToTheRecipientLimit(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st := sc.Open(t, store.Options{RecipientLimit: store.RecipientLimit{Mails: 2, Window: 30 * 24 * time.Hour}})
	sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload, subject, body_text,
		body_html, message_id, status, sent_at)
		VALUES (gen_random_uuid(), 'order-confirmed:1', '1', 'order_confirmed', 'en', 'Ann@Example.com', '{}', 'Your order',
		'text', '<p>html</p>', '<m1@shop.example>', 'sent', now())`)
	ctx := t.Context()
	for i, want := range []string{"order-confirmed:1:resend:1", "order-confirmed:1:resend:2"} {
		key, err := st.Resend(ctx, "order-confirmed:1", "shop.example", "ns")
		require.NoError(t, err, "resend %d", i+1)
		require.Equal(t, want, key)
		sc.Exec(t, `UPDATE mail SET status = 'sent', sent_at = now() WHERE dedupe_key = $1`, key)
	}
	const refusal = "cannot resend mail order-confirmed:1: it is sent; its recipient has had 2 mails in the current window of " +
		"mail.recipient_limit_window (720h0m0s), and mail.recipient_limit is 2: wait for the next window, or raise the limit if this is no flood"
	_, err := st.ResendDryRun(ctx, "order-confirmed:1", "shop.example", "ns")
	require.EqualError(t, err, "resend order-confirmed:1: "+refusal)
	_, err = st.Resend(ctx, "order-confirmed:1", "shop.example", "ns")
	require.EqualError(t, err, "resend order-confirmed:1: "+refusal)
	require.ErrorIs(t, err, store.ErrWrongState)
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT sum(mails) FROM recipient_window WHERE recipient = 'ann@example.com'`))
}
