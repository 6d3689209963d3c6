package templates_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// The notice goes first in each part, escaped in the HTML; a copy of a
// copy that carries it already gets it once, not twice.
func TestAddResendNoticeOnce(t *testing.T) {
	t.Parallel()
	const notice = `If you already received this e-mail, please ignore it. <"quoted">`
	text, html := templates.AddResendNotice("Thank you.\n", "<html><body>\n<p>Thank you.</p></body></html>", notice)
	require.Equal(t, notice+"\n\nThank you.\n", text)
	require.Contains(t, html, "<body>\n<p style=")
	require.Contains(t, html, "&lt;&#34;quoted&#34;&gt;</p>\n<p>Thank you.</p>")
	text2, html2 := templates.AddResendNotice(text, html, notice)
	require.Equal(t, text, text2)
	require.Equal(t, html, html2)
}
