package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// `mail resend KEY --notice` writes the copy with the notice of the
// mail's template in its language (vi), the original untouched.
func TestMailResendNotice(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:5", "5", mailtype.StatusSent)
	out, err := o.run(t, "mail", "resend", "order-confirmed:5", "--notice", "--reason", "customer lost it")
	require.NoError(t, err)
	require.Equal(t, "created order-confirmed:5:resend:1 (pending) as a copy of order-confirmed:5 with the resend notice; "+
		"follow it with `mailsvc mail show order-confirmed:5:resend:1`\n", out)
	const vi = "Nếu bạn đã nhận được email này, vui lòng bỏ qua: đây là bản chúng tôi gửi lại."
	require.Equal(t, []string{"text", vi + "\n\ntext"},
		o.sc.QueryStrings(t, `SELECT body_text FROM mail WHERE order_id = '5' ORDER BY id`))
	require.Equal(t, []string{"<p>html</p>", `<p style="margin:0;padding:12px 24px;font-family:Arial,Helvetica,sans-serif;font-size:14px;line-height:20px;` +
		`background-color:#fef3c7;color:#111827;">` + vi + "</p>\n<p>html</p>"},
		o.sc.QueryStrings(t, `SELECT body_html FROM mail WHERE order_id = '5' ORDER BY id`))
}
