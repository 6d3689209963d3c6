package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

const script = `<script>alert(1)</script>`

// storeMail is a mail of order id with a customer name with quotes and an
// item that is markup.
func storeMail(orderID string) storetest.Mail {
	return storetest.Mail{OrderID: orderID, ToEmail: "ann@example.com", ToName: `Ann "Annie" O'Neil`,
		CustomerName: `Ann "Annie" O'Neil`,
		BodyHTML:     `<p>Order ` + orderID + `: <b>&lt;script&gt;alert(1)&lt;/script&gt;</b></p><img src="https://tracker.example/p.gif">`,
		BodyText:     "Order " + orderID + ": " + script + "\n"}
}

func TestStoredMarkupRendersAsText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storetest.Mail{OrderID: script, DedupeKey: "order-confirmed:" + script, ToEmail: `"o'neil"@example.com`})
	_, _, err := b.sc.Store.Suppress(context.Background(), "o'neil@example.com", `bounced: "`+script+`"`, store.SourceOperator)
	require.NoError(t, err)
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/orders/" + url.PathEscape(script))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, script)
	require.Contains(t, body, "Order <span class=\"key\">&lt;script&gt;alert(1)&lt;/script&gt;</span>")
	require.Contains(t, body, `<td>&#34;o&#39;neil&#34;@example.com</td>`)
	code, body = v.get("/suppressions")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, script)
	require.Contains(t, body, `<td>o&#39;neil@example.com</td>`)
	require.Contains(t, body, `&lt;script&gt;alert(1)&lt;/script&gt;`)
	// What a person types is echoed as text too.
	code, body = v.get("/search?order_id=" + url.QueryEscape(`"><script>alert(1)</script>`) + "&page=0")
	require.Equal(t, http.StatusBadRequest, code)
	require.NotContains(t, body, script)
}

func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := b.login(t, viewerName, viewerPassword)
	for _, p := range []string{"/login", "/search", "/overview", "/suppressions", "/orders/1", "/nowhere", "/api/v1/overview", "/api/v1/nowhere", "/static/console.css"} {
		resp, _ := v.request(http.MethodGet, p, nil, "")
		h := resp.Header
		require.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; frame-src 'self'; base-uri 'none'",
			h.Get("Content-Security-Policy"), p)
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), p)
		require.Equal(t, "no-referrer", h.Get("Referrer-Policy"), p)
		require.Equal(t, "DENY", h.Get("X-Frame-Options"), p)
		if p != "/static/console.css" {
			require.Equal(t, "no-store", h.Get("Cache-Control"), p)
		}
	}
}

func TestTheConsoleServesNoProbeMetricsOrWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := b.login(t, operatorName, operatorPassword)
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/", "/webhooks/resend"} {
		code, _ := v.get(p)
		require.Equal(t, http.StatusNotFound, code, p)
	}
	code, _ := v.post("/webhooks/resend", nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestTheMailAsSentQuotesDisplayNamesAsTheHeaderDoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storetest.Mail{OrderID: "q1", ToEmail: "ann@example.com", ToName: "x <evil@attacker.com>",
		From: `"Shop, Inc." <orders@shop.example>`, ReplyTo: "Cửa hàng <help@shop.example>"})
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/mails/" + key)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dt>To</dt><dd>&#34;x &lt;evil@attacker.com&gt;&#34; &lt;ann@example.com&gt;</dd>`)
	require.Contains(t, body, `<dt>From</dt><dd>&#34;Shop, Inc.&#34; &lt;orders@shop.example&gt;</dd>`)
	require.Contains(t, body, `<dt>Reply-To</dt><dd>&#34;Cửa hàng&#34; &lt;help@shop.example&gt;</dd>`)
}
