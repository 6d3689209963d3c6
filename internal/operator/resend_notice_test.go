package operator_test

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// A resend with the notice: the copy's text and HTML start with the
// notice in the mail's language, its subject and the original are
// unchanged, and two claims of the copy (two attempts) get the same bytes.
func TestResendWithNotice(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	r, err := reg.Render(templates.OrderConfirmed, "vi", templates.Order{OrderID: "7", Email: "b@example.com", CustomerName: "Bình",
		Currency: "VND", Items: []templates.Item{{Name: "Áo", Quantity: 1, UnitPrice: "100000"}}})
	require.NoError(t, err)
	b.sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload, subject, body_text,
		body_html, message_id, status, attempts, sent_at) VALUES (gen_random_uuid(), 'order-confirmed:7', '7', 'order_confirmed', 'vi',
		'b@example.com', '{}', $1, $2, $3, 'm@shop.example', 'sent', 1, now())`, r.Subject, r.Text, r.HTML)

	_, err = b.a.ResendWith(b.ctx, ann, "order-confirmed:7", "customer asked", true, operator.ResendOptions{Notice: true})
	require.ErrorIs(t, err, operator.ErrNoNotices)
	b.a.Notices = reg.ResendNotice
	dry, err := b.a.ResendWith(b.ctx, ann, "order-confirmed:7", "", true, operator.ResendOptions{Notice: true})
	require.NoError(t, err)
	require.Equal(t, "would create order-confirmed:7:resend:1 (pending) as a copy of order-confirmed:7 with the resend notice (dry run: nothing changed)", dry.Summary)
	res, err := b.a.ResendWith(b.ctx, ann, "order-confirmed:7", "customer asked", false, operator.ResendOptions{Notice: true})
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:7:resend:1", res.NewKey)

	const vi = "Nếu bạn đã nhận được email này, vui lòng bỏ qua: đây là bản chúng tôi gửi lại."
	copyContent := content(t, b, res.NewKey)
	require.Equal(t, r.Subject, copyContent[0])
	require.Equal(t, vi+"\n\n"+r.Text, copyContent[1])
	cHTML := copyContent[2]
	require.Contains(t, cHTML, `background-color:#fef3c7;color:#111827;">`+html.EscapeString(vi)+"</p>\n<div")
	require.Equal(t, r.HTML, strings.Replace(cHTML, cHTML[strings.Index(cHTML, "<p style=\"margin:0;padding:12px"):strings.Index(cHTML, "</p>\n<div")+5], "", 1))
	require.Equal(t, [3]string{r.Subject, r.Text, r.HTML}, content(t, b, "order-confirmed:7"), "the original is unchanged")

	first := claimCopy(t, b)
	second := claimCopy(t, b)
	require.Equal(t, first, second, "every attempt sends the stored copy")
	require.Equal(t, copyContent, first)

	en, err := reg.ResendNotice(templates.OrderCancelled, "en-GB")
	require.NoError(t, err)
	require.Equal(t, "If you already received this e-mail, please ignore it: this is a copy we sent again.", en)
	_, err = reg.ResendNotice("nope", "en")
	require.Equal(t, mailtype.ReasonUnknownTemplate, mailtype.ReasonOf(err))
}

// claimCopy claims the one pending mail with a lease that runs out at
// once (a send that never started: the next claim takes it again) and
// returns what a sender gets.
func claimCopy(t *testing.T, b *actionsBundle) [3]string {
	t.Helper()
	var got []store.ClaimedMail
	require.Eventually(t, func() bool {
		var err error
		got, err = b.sc.Store.ClaimMails(b.ctx, store.ClaimParams{Limit: 10, Lease: time.Millisecond, Worker: "w"})
		require.NoError(t, err)
		return len(got) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "order-confirmed:7:resend:1", got[0].DedupeKey)
	return [3]string{got[0].Subject, got[0].BodyText, got[0].BodyHTML}
}

// content is the stored subject, text and HTML of the mail key.
func content(t *testing.T, b *actionsBundle, key string) [3]string {
	t.Helper()
	got := b.sc.QueryStrings(t, `SELECT unnest(ARRAY[subject, body_text, body_html]) FROM mail WHERE dedupe_key = $1`, key)
	require.Len(t, got, 3)
	return [3]string{got[0], got[1], got[2]}
}
