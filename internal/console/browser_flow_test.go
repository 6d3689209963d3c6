package console_test

// The browser's half of flow_test.go: an operator finds order 42, reads
// its story and resends it; a cancelled order's resend is refused.

import (
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestBrowserAnOperatorFindsOrder42SeesItsStoryAndResendsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("42"))
	b.insertSent(t, storetest.Mail{OrderID: "41", ToEmail: "bob@example.com"})
	_, _, err := b.sc.Store.Suppress(t.Context(), "mallory@example.com", "complained (EmailComplained)", store.SourceOperator)
	require.NoError(t, err)
	ctx := tab(t)
	browserLogin(t, ctx, b, operatorName, operatorPassword)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=order_id]`), "42"),
		chromedp.Submit(chromedp.CSS(`input[name=order_id]`)),
	))
	require.Equal(t, "1–1 of 1", text(t, ctx, `#count`))
	screenshot(t, ctx, "search")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`table.mails tbody td:nth-child(1) a`))))
	require.Contains(t, text(t, ctx, `#verdict`), "accepted by the provider at")
	require.Contains(t, text(t, ctx, `#timeline`), "received")
	require.Equal(t, "Order 42: "+script, text(t, ctx, `#text`), "the text part as text")
	screenshot(t, ctx, "mail")
	fullScreenshot(t, ctx, "mail", 1500)
	// The preview, as its frame loads it: the stored HTML, no script run.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/mails/"+url.PathEscape(key)+"/preview")))
	require.Equal(t, "Order 42: "+script, text(t, ctx, `p`))
	// Resend: the confirmation, a reason, the result, the new mail.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/mails/"+url.PathEscape(key)),
		chromedp.Click(chromedp.CSS(`a.button[href^="/actions/resend"]`))))
	require.Contains(t, text(t, ctx, `#plan`), "What will happen:")
	screenshot(t, ctx, "confirm")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "customer asked, ticket 7"),
		chromedp.Submit(chromedp.CSS(`input[name=reason]`)),
	))
	require.Equal(t, "order-confirmed:42:resend:1", text(t, ctx, `#newmail`))
	require.Equal(t, int64(3), b.mails(t))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/audit")))
	row := text(t, ctx, `#audit tbody tr`)
	require.Contains(t, row, operatorName)
	require.Contains(t, row, "customer asked, ticket 7")
	screenshot(t, ctx, "audit")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/overview")))
	require.Contains(t, text(t, ctx, `#dlq`), "unknown")
	screenshot(t, ctx, "overview")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/suppressions")))
	screenshot(t, ctx, "suppressions")
}

func TestBrowserACancelledOrdersResendIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("43"))
	b.sc.Exec(t, `UPDATE mail SET status = 'cancelled', sent_at = NULL WHERE dedupe_key = 'order-confirmed:43'`)
	ctx := tab(t)
	browserLogin(t, ctx, b, operatorName, operatorPassword)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/mails/order-confirmed:43"),
		chromedp.Click(chromedp.CSS(`a.button[href^="/actions/resend"]`))))
	require.Contains(t, text(t, ctx, `#refusal`), "cannot resend mail order-confirmed:43: it is cancelled; the order was cancelled")
	require.Equal(t, int64(1), b.mails(t))
}
