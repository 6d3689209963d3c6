package consumer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

func invoiceEvent(size int) map[string]any {
	ev := confirmedEvent("42")
	data(ev)["attachments"] = []any{map[string]any{
		"file_name": "Hóa đơn 42.pdf", "content_type": "application/pdf",
		"url": "https://invoices.example.com/42.pdf", "sha256": strings.Repeat("0f", 32), "size": size,
	}}
	return ev
}

// A deployment that fetches no attachment refuses an event carrying one,
// naming the key, rather than send the mail without its file.
func TestAttachmentsRefusedWhenTheDeploymentFetchesNone(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	dec := d.Decide(consumer.Message{Body: body(t, invoiceEvent(100))})
	require.Equal(t, consumer.ActionDeadLetter, dec.Action)
	require.Equal(t, mailtype.ReasonInvalidField, dec.Err.Reason)
	require.Contains(t, dec.Err.Error(), "attachments.allowed_hosts")

	d.Attachments = consumer.AttachmentRules{Enabled: true}
	dec = d.Decide(consumer.Message{Body: body(t, invoiceEvent(100))})
	require.Equal(t, consumer.ActionRecord, dec.Action, "%v", dec.Err)
	require.Contains(t, string(dec.Item.Mail.Payload), `"sha256"`, "the claim-check travels with the stored payload")
}

// mail.max_attachment_bytes bounds a mail's files in total.
func TestAttachmentsOverTheConfiguredTotal(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	d.Attachments = consumer.AttachmentRules{Enabled: true, MaxBytes: 1000}
	require.Equal(t, consumer.ActionRecord, d.Decide(consumer.Message{Body: body(t, invoiceEvent(1000))}).Action)
	dec := d.Decide(consumer.Message{Body: body(t, invoiceEvent(1001))})
	require.Equal(t, consumer.ActionDeadLetter, dec.Action)
	require.Contains(t, dec.Err.Error(), "mail.max_attachment_bytes (1000)")
}

func TestCheckFileName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"invoice.pdf", "Hóa đơn 42.pdf", "a..b", strings.Repeat("x", 255), " a.pdf", "فاتورة.pdf"} {
		require.NoError(t, consumer.CheckFileName(ok), ok)
	}
	for name, want := range map[string]string{
		"":                       "empty",
		"../x.pdf":               "path separator",
		`a\b.pdf`:                "path separator",
		"a\r\nb.pdf":             "control",
		"a\x00b":                 "control",
		"a\u0085b":               "control",
		"a\u2028b":               "control",
		"..":                     ". or ..",
		strings.Repeat("đ", 128): "more than 255",
		"\xff.pdf":               "UTF-8",
		"invoice\u202Efdp.exe":   "formatting",
		"a\u200Fb.pdf":           "formatting",
		"a\u2066b.pdf":           "formatting",
		"\ufeffa.pdf":            "formatting",
		" ":                      "blank",
		"\u00a0\u3000":           "blank",
	} {
		err := consumer.CheckFileName(name)
		require.Error(t, err, "%q", name)
		require.Contains(t, err.Error(), want, "%q", name)
	}
}

// Attachments travel by reference through the real consumer: a good
// reference is recorded waiting for its file (the consumer fetches
// nothing), bad ones are dead-lettered with their reason, and the events
// around them keep flowing.
func TestConsumerRecordsAttachmentsByReferenceAndKeepsFlowing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Attachments = consumer.AttachmentRules{Enabled: true}
	r := b.start(t)
	ref := func(orderID string, change func(a map[string]any)) []byte {
		ev := confirmedNow(orderID)
		a := map[string]any{"file_name": "Hóa đơn " + orderID + ".pdf", "content_type": "application/pdf",
			"url": "https://invoices.example.com/" + orderID, "sha256": strings.Repeat("0f", 32), "size": 1000}
		if change != nil {
			change(a)
		}
		data(ev)["attachments"] = []any{a}
		return body(t, ev)
	}
	bad := [][]byte{
		ref("b1", func(a map[string]any) { a["url"] = "http://invoices.example.com/b1" }),
		ref("b2", func(a map[string]any) { a["file_name"] = "../b2.pdf" }),
		ref("b3", func(a map[string]any) { a["file_name"] = "b3\r\n.pdf" }),
		ref("b4", func(a map[string]any) { a["sha256"] = "not-a-digest" }),
	}
	b.publish(t, "order.confirmed", ref("g1", nil))
	b.publish(t, "order.confirmed", bad...)
	b.publish(t, "order.confirmed", body(t, confirmedNow("g2")))
	r.waitConsumed(t, 6)

	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM mail WHERE status = 'pending'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = 'g1' AND attach_state = 'pending'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE order_id = 'g2' AND attach_state IS NULL`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM mail_attachment`), "nothing fetched on the ingest path")
	dead := b.deadLetters(t)
	require.Len(t, dead, len(bad))
	for _, d := range dead {
		require.Equal(t, string(mailtype.ReasonInvalidField), d.Headers[deadletter.HeaderErrorReason], "%s", d.Body)
	}
}
