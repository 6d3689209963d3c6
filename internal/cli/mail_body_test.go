package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// TestMailShowBody: `mail show --body` prints the stored rendered mail
// (store.MailContentByKey) as sent: headers, text, HTML.
func TestMailShowBody(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:42", "42", mailtype.StatusSent)
	o.sc.Exec(t, `UPDATE mail SET from_addr = 'Shop <orders@shop.example>', to_name = 'Bé Ann', reply_to = 'help@shop.example'`)
	msgID := mailtype.MessageID("order-confirmed:42", "shop.example")

	out, err := o.run(t, "mail", "show", "order-confirmed:42", "--body")
	require.NoError(t, err)
	require.Equal(t, "From: Shop <orders@shop.example>\nTo: Bé Ann <b@example.com>\nReply-To: help@shop.example\n"+
		"Subject: Xác nhận đơn hàng\nMessage-ID: "+msgID+"\n\n--- text/plain ---\ntext\n--- text/html ---\n<p>html</p>\n", out)

	out, err = o.run(t, "mail", "show", "order-confirmed:42", "--body", "--json")
	require.NoError(t, err)
	var c store.MailContent
	require.NoError(t, json.Unmarshal([]byte(out), &c))
	require.Equal(t, store.MailContent{DedupeKey: "order-confirmed:42", From: "Shop <orders@shop.example>", To: "b@example.com",
		ToName: "Bé Ann", ReplyTo: "help@shop.example", Subject: "Xác nhận đơn hàng", MessageID: msgID, Text: "text", HTML: "<p>html</p>"}, c)

	_, err = o.run(t, "mail", "show", "order-confirmed:404", "--body")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.ErrorContains(t, err, `no mail has dedupe key "order-confirmed:404"`)
	_, err = o.run(t, "mail", "show", "--order", "42", "--body")
	require.ErrorContains(t, err, "--body shows one mail")
}
