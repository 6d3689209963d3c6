package console_test

// The support desk's flows over the real store and operator actions:
// search, a mail's page, resend and its refusals, through the pages and
// the API.

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// audit lists the audit log.
func (b *bundle) audit(t *testing.T) []store.AuditEntry {
	t.Helper()
	entries, err := b.sc.Store.ListAudit(context.Background(), store.AuditQuery{Limit: 100})
	require.NoError(t, err)
	return entries
}

func TestSearchCountsPagesAndFindsByRecipient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("42"))
	b.insertSent(t, storetest.Mail{OrderID: "43", ToEmail: "bob@example.com"})
	code, out := b.api(t, b.viewerToken, "GET", "/api/v1/mails?order_id=42", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, float64(1), out["total"])
	mails := out["mails"].([]any)
	require.Len(t, mails, 1)
	require.Equal(t, "order-confirmed:42", mails[0].(map[string]any)["dedupe_key"])
	// A page past the end: the total, no mail.
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/mails?order_id=42&page=9", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, float64(1), out["total"])
	require.Empty(t, out["mails"])
	// The domain matches whatever its case; brackets and space go.
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/mails?recipient="+url.QueryEscape(" <ann@EXAMPLE.com> "), nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, float64(1), out["total"])

	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/search?order_id=42")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<p class="count" id="count">1–1 of 1</p>`)
	code, body = v.post("/search", url.Values{"csrf": {v.csrf}, "recipient": {"bob@example.com"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<a href="/mails/order-confirmed:43">order-confirmed:43</a>`)
	require.NotContains(t, body, "order-confirmed:42<")
	code, body = v.get("/search?order_id=42&page=3")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<p class="count" id="count">0 of 1</p>`)
}

func TestMailPageShowsTheVerdictTimelineAndSandboxedPreview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("42"))
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/mails/" + key)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "accepted by the provider at ")
	require.Regexp(t, regexp.MustCompile(`<li class="t-received">`), body)
	require.Contains(t, body, `<iframe class="preview" id="preview" sandbox src="/mails/order-confirmed:42/preview"`)
	require.Contains(t, body, `<dt>To</dt><dd>&#34;Ann \&#34;Annie\&#34; O&#39;Neil&#34; &lt;ann@example.com&gt;</dd>`, "the customer's name with quotes is text, quoted as in the header")
	require.Contains(t, body, "Order 42: &lt;script&gt;alert(1)&lt;/script&gt;", "the text part is text")
	require.NotContains(t, body, script)
	require.Contains(t, body, `<input type="hidden" name="recipient" value="ann@example.com">`)

	resp, html := v.request(http.MethodGet, "/mails/"+key+"/preview", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox",
		resp.Header.Get("Content-Security-Policy"))
	require.Equal(t, "SAMEORIGIN", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, storeMail("42").BodyHTML, html)

	code, out := b.api(t, b.viewerToken, "GET", "/api/v1/mails/"+key, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "received", out["timeline"].([]any)[0].(map[string]any)["kind"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/mails/"+key+"/content", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, `Ann "Annie" O'Neil`, out["to_name"])
}

func TestAnUnknownOrUnreadableKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/mails/order-confirmed:999")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "<h1>Not found</h1>")
	code, out := b.api(t, b.viewerToken, "GET", "/api/v1/mails/order-confirmed:999", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "not_found", out["kind"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/mails/order-confirmed:%FF", nil)
	require.Equal(t, http.StatusBadRequest, code, "not UTF-8: bad input, never a database failure")
	require.Equal(t, "invalid", out["kind"])
	code, out = b.api(t, b.operatorToken, "POST", "/api/v1/mails/order-confirmed:999/resend", map[string]any{"reason": "x"})
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "not_found", out["kind"])
	require.Equal(t, int64(0), b.mails(t))
}

func TestAnOperatorResendsThroughTheConfirmationOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("42"))
	o := b.login(t, operatorName, operatorPassword)
	code, body := o.get("/actions/resend?key=" + url.QueryEscape(key))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<p class="notice" id="plan">What will happen: `)
	require.Equal(t, int64(1), b.mails(t), "the confirmation changes nothing")
	require.Empty(t, b.audit(t), "nor writes an audit row")
	nonce := regexp.MustCompile(`name="nonce" value="([^"]+)"`).FindStringSubmatch(body)[1]
	form := url.Values{"csrf": {o.csrf}, "nonce": {nonce}, "key": {key}, "reason": {"customer asked, ticket 7"}}
	code, body = o.post("/actions/resend", form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a id="newmail" href="/mails/order-confirmed:42:resend:1">order-confirmed:42:resend:1</a>`)
	require.Equal(t, int64(2), b.mails(t))
	entries := b.audit(t)
	require.Len(t, entries, 1)
	require.Equal(t, store.AuditEntry{ID: entries[0].ID, At: entries[0].At, Actor: operatorName, Via: "console", Action: "resend",
		Target: key, DedupeKey: key, Reason: "customer asked, ticket 7", Result: "done", Detail: entries[0].Detail}, entries[0])
	// The same POST again (a reload, a double click): refused, nothing done.
	code, body = o.post("/actions/resend", form)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "this confirmation was already used (or has expired): nothing was done again")
	require.Equal(t, int64(2), b.mails(t))
	require.Len(t, b.audit(t), 1)
	code, body = o.get("/audit")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "customer asked, ticket 7")
}

func TestTheAPIResendsDryAndForReal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("42"))
	code, out := b.api(t, b.operatorToken, "POST", "/api/v1/mails/"+key+"/resend", map[string]any{"reason": "ticket 7", "dry_run": true})
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, out["summary"], "what a resend would do")
	require.Equal(t, int64(1), b.mails(t))
	require.Empty(t, b.audit(t))
	code, out = b.api(t, b.operatorToken, "POST", "/api/v1/mails/"+key+"/resend", map[string]any{"reason": "ticket 7"})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "order-confirmed:42:resend:1", out["new_key"])
	entries := b.audit(t)
	require.Len(t, entries, 1)
	require.Equal(t, "automation", entries[0].Actor)
	require.Equal(t, "api", entries[0].Via)
}

// A resend with the notice: the confirmation names it, the copy starts
// with the notice in the mail's language (vi), the original is unchanged;
// the API takes it as "notice": true.
func TestAResendCanCarryTheResendNotice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("44"))
	notice := func(k string) string {
		return b.sc.QueryMap(t, `SELECT dedupe_key, left(body_text, 200) FROM mail WHERE dedupe_key = $1`, k)[k]
	}
	before := notice(key)
	o := b.login(t, operatorName, operatorPassword)
	code, body := o.get("/actions/resend?key=" + key + "&notice=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "the copy starting with the resend notice")
	require.Contains(t, body, `name="notice" value="1"`)
	code, body = o.get("/actions/resend?key=" + key + "&notice=maybe")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `notice: 1 or 0, got &#34;maybe&#34;`)

	code, out := b.api(t, b.operatorToken, "POST", "/api/v1/mails/"+key+"/resend", map[string]any{"reason": "ticket 9", "notice": true})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, key+":resend:1", out["new_key"])
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	line, err := reg.ResendNotice("order_confirmed", "vi")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(notice(key+":resend:1"), line), "the copy starts with the notice: %q", notice(key+":resend:1"))
	require.Equal(t, before, notice(key), "the original is unchanged")
}

func TestACancelledOrdersResendIsRefusedAsTheCLIRefusesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("43"))
	b.sc.Exec(t, `UPDATE mail SET status = 'cancelled', sent_at = NULL WHERE dedupe_key = 'order-confirmed:43'`)
	const refusal = "cannot resend mail order-confirmed:43: it is cancelled; the order was cancelled"
	o := b.login(t, operatorName, operatorPassword)
	code, body := o.get("/actions/resend?key=order-confirmed:43")
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, refusal)
	require.NotContains(t, body, `name="nonce"`, "nothing to confirm")
	code, out := b.api(t, b.operatorToken, "POST", "/api/v1/mails/order-confirmed:43/resend", map[string]any{"reason": "x"})
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "refused", out["kind"])
	require.Contains(t, out["error"], refusal)
	require.Equal(t, int64(1), b.mails(t))
}

func TestAnOperatorMayTakeEveryAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("1"))
	for _, rt := range console.Routes() {
		if !rt.Operator {
			continue
		}
		code, out := b.api(t, b.operatorToken, rt.Method, apiPath(rt.Path),
			map[string]any{"reason": "matrix", "dry_run": true, "address": "ann@example.com", "delivered": true})
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError}, code,
			"%s %s: %v", rt.Method, rt.Path, out)
	}
	require.Equal(t, int64(1), b.mails(t), "dry runs change nothing")
	require.Empty(t, b.audit(t), "nor write the audit log")
}

func TestSuppressingAnAddressKeepsItOutOfURLs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.login(t, operatorName, operatorPassword)
	code, body := o.post("/actions/suppress/confirm", url.Values{"csrf": {o.csrf}, "address": {" <Ann@Example.COM> "}})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Target: <b>the address Ann@example.com</b>")
	nonce := regexp.MustCompile(`name="nonce" value="([^"]+)"`).FindStringSubmatch(body)[1]
	code, body = o.post("/actions/suppress", url.Values{"csrf": {o.csrf}, "nonce": {nonce}, "address": {"Ann@example.com"},
		"reason": {"asked to receive nothing"}})
	require.Equal(t, http.StatusOK, code, body)
	list, err := b.sc.Store.Suppressions(context.Background())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "Ann@example.com", list[0].Address)
	// The nonce was for this address: another one cannot use it.
	code, _ = o.post("/actions/suppress", url.Values{"csrf": {o.csrf}, "nonce": {nonce}, "address": {"bob@example.com"}, "reason": {"x"}})
	require.Equal(t, http.StatusConflict, code)
}
