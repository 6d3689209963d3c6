package templates_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// TestCancelledNotice checks what the notice tells the customer in every
// locale and part: the order was cancelled, the earlier confirmation no
// longer applies, a payment is refunded per the shop's policy; and that it
// lists the items and the total exactly as the confirmation does (same
// lines, same money format).
func TestCancelledNotice(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	want := map[string]struct{ subject, cancelled, confirmation, refund string }{
		"en": {
			"Your order #42 has been cancelled", "Your order #42 has been cancelled.",
			"If you received a confirmation for this order, it no longer applies.",
			"If you were charged for this order, the amount will be refunded according to our refund policy.",
		},
		"vi": {
			"Đơn hàng #42 đã bị hủy", "Đơn hàng #42 của bạn đã bị hủy.",
			"Nếu bạn đã nhận được email xác nhận cho đơn hàng này, xác nhận đó không còn hiệu lực.",
			"Nếu bạn đã thanh toán cho đơn hàng này, khoản tiền sẽ được hoàn lại theo chính sách hoàn tiền của chúng tôi.",
		},
	}
	require.Len(t, want, len(locales))
	for _, locale := range locales {
		w := want[locale]
		notice, err := r.Render(templates.OrderCancelled, locale, sampleOrder())
		require.NoError(t, err)
		confirmed, err := r.Render(templates.OrderConfirmed, locale, sampleOrder())
		require.NoError(t, err)
		require.Equal(t, w.subject, notice.Subject)
		require.Equal(t, confirmed.ToAddress, notice.ToAddress)
		require.Equal(t, confirmed.ToName, notice.ToName)
		for _, part := range []string{notice.Text, notice.HTML} {
			require.Equal(t, 1, strings.Count(part, w.cancelled), locale)
			require.Equal(t, 1, strings.Count(part, w.confirmation), locale)
			require.Equal(t, 1, strings.Count(part, w.refund), locale)
		}
		lines, rows := orderLines(notice.Text), htmlRows(notice.HTML)
		require.Len(t, lines, 10, "%s: three items of two lines and a blank line each, then the total", locale)
		require.Contains(t, rows, ">"+map[string]string{"en": "₫1,905,000", "vi": "1.905.000 ₫"}[locale]+"</td>", locale)
		require.Equal(t, orderLines(confirmed.Text), lines, "%s: text lines and total as confirmed", locale)
		require.Equal(t, htmlRows(confirmed.HTML), rows, "%s: HTML details, lines and total as confirmed", locale)
	}
}

// orderLines returns the item lines and the total line of a text part:
// from the first line starting with "- " up to the total.
func orderLines(text string) []string {
	lines := strings.Split(text, "\n")
	start := 0
	for start < len(lines) && !strings.HasPrefix(lines[start], "- ") {
		start++
	}
	end := start
	for end < len(lines) && !strings.HasPrefix(lines[end], "Total:") && !strings.HasPrefix(lines[end], "Tổng cộng:") {
		end++
	}
	return lines[start : end+1]
}

// htmlRows returns the HTML from the order-details table to the end of the
// items table (order number, date, every line, the total).
func htmlRows(html string) string {
	start := strings.Index(html, `<td style="padding:0 24px 16px 24px;">`)
	end := strings.LastIndex(html, "</table>\n</td>\n</tr>\n<tr>\n<td style=\"padding:16px")
	if start < 0 || end < start {
		return ""
	}
	return html[start:end]
}
