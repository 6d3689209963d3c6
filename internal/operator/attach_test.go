package operator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestAttachmentLines(t *testing.T) {
	t.Parallel()
	m := store.MailView{DedupeKey: "order-confirmed:9", Status: "pending", AttachState: "pending",
		Attachments: []store.AttachmentView{{FileName: "Hóa đơn.pdf", ContentType: "application/pdf", Size: 48213,
			Optional: true, Status: "pending", Attempts: 2, Reason: "status", Detail: "HTTP 503"}}}
	var got []string
	for _, f := range operator.MailReport(m, m.CreatedAt) {
		if f.Name == "attachments" || f.Name == "attachment" {
			got = append(got, f.Name+": "+f.Value)
		}
	}
	require.Equal(t, []string{
		"attachments: pending: not sent before every file is fetched and verified",
		"attachment: Hóa đơn.pdf (application/pdf, 48213 bytes, optional): pending after 2 attempts, last refused: status: HTTP 503",
	}, got)
}
