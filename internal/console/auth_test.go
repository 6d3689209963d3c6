package console_test

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/console"
)

// pagePaths are the page routes a person opens; each needs a login.
var pagePaths = []string{"/search", "/mails/order-confirmed:1", "/mails/order-confirmed:1/preview", "/orders/1",
	"/overview", "/suppressions", "/audit", "/actions/resend?key=order-confirmed:1"}

// apiPath fills a route's wildcards.
func apiPath(p string) string {
	return strings.NewReplacer("{key}", "order-confirmed:1", "{id}", "1", "{name}", "smtp").Replace(p)
}

func TestWithoutCredentialsPagesGoToLoginAndTheAPIAnswers401(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.anonymous(t)
	for _, p := range pagePaths {
		resp, _ := c.request(http.MethodGet, p, nil, "")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, p)
		require.Equal(t, "/login", resp.Header.Get("Location"), p)
	}
	for _, rt := range console.Routes() {
		code, out := b.api(t, "", rt.Method, apiPath(rt.Path), map[string]any{"reason": "x"})
		require.Equal(t, http.StatusUnauthorized, code, rt.Path)
		require.Equal(t, "unauthenticated", out["kind"], rt.Path)
		require.Equal(t, "authentication required: log in, or send Authorization: Bearer TOKEN", out["error"])
		code, out = b.api(t, "not-a-token", rt.Method, apiPath(rt.Path), map[string]any{"reason": "x"})
		require.Equal(t, http.StatusUnauthorized, code, rt.Path)
		require.Equal(t, "unknown API token", out["error"])
	}
}

func TestAViewerIsRefusedEveryAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("1"))
	before := b.mails(t)
	n := 0
	for _, rt := range console.Routes() {
		if !rt.Operator {
			continue
		}
		n++
		code, out := b.api(t, b.viewerToken, rt.Method, apiPath(rt.Path),
			map[string]any{"reason": "try", "address": "ann@example.com", "delivered": true})
		require.Equal(t, http.StatusForbidden, code, rt.Path)
		require.Equal(t, "forbidden", out["kind"])
		require.Contains(t, out["error"], "your role is viewer: only an operator may act")
	}
	require.Equal(t, 6, n, "the API has six actions")
	// The pages: the confirmation (GET and POST) and the action itself.
	v := b.login(t, viewerName, viewerPassword)
	for _, a := range []string{"resend", "reconcile", "resume", "suppress", "unsuppress", "replay"} {
		code, body := v.get("/actions/" + a + "?key=order-confirmed:1&provider=smtp&outcome=delivered")
		require.Equal(t, http.StatusForbidden, code, a)
		require.Contains(t, body, "your role is viewer: only an operator may act")
		code, _ = v.post("/actions/"+a+"/confirm", url.Values{"csrf": {v.csrf}, "address": {"ann@example.com"}})
		require.Equal(t, http.StatusForbidden, code, a)
		code, _ = v.post("/actions/"+a, url.Values{"csrf": {v.csrf}, "key": {"order-confirmed:1"}, "reason": {"x"}, "nonce": {"n"}})
		require.Equal(t, http.StatusForbidden, code, a)
	}
	require.Equal(t, before, b.mails(t), "nothing changed")
}

func TestAViewerReadsWhatExistsAlready(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storeMail("7"))
	code, out := b.api(t, b.viewerToken, "GET", "/api/v1/orders/7/mails", nil)
	require.Equal(t, http.StatusOK, code)
	mails := out["mails"].([]any)
	require.Len(t, mails, 1)
	require.Equal(t, key, mails[0].(map[string]any)["dedupe_key"])
	require.Equal(t, "sent", mails[0].(map[string]any)["status"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/orders/8/mails", nil)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, out["mails"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/suppressions", nil)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, out["suppressions"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/overview", nil)
	require.Equal(t, http.StatusOK, code)
	require.Nil(t, out["dead_letter_depth"], "no broker information: unknown")
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/orders/7")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<a href="/mails/order-confirmed:7">order-confirmed:7</a>`)
	require.NotContains(t, body, "Resend…", "a viewer gets no action button")
	code, body = v.get("/overview")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dd id="dlq">unknown (no broker information on this replica)</dd>`)
}

func TestLoginSessionCookieAndLogout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.anonymous(t)
	_, body := c.get("/login")
	code, body := c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {operatorName}, "password": {"wrong"}})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "unknown name or wrong password")
	resp, _ := c.request(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]},
		"name": {operatorName}, "password": {operatorPassword}}.Encode()), "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "mailsvc_console" {
			session = ck
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.True(t, session.Secure)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	code, body = c.get("/search")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "otto · operator")
	// Logging out ends the session server-side: the old cookie is refused.
	old := c.cookies["mailsvc_console"]
	code, _ = c.post("/logout", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}})
	require.Equal(t, http.StatusSeeOther, code)
	c.cookies["mailsvc_console"] = old
	resp, _ = c.request(http.MethodGet, "/search", nil, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	// A login form without its own anti-forgery token is refused.
	code, body = b.anonymous(t).post("/login", url.Values{"csrf": {"forged"}, "name": {operatorName}, "password": {operatorPassword}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "this login form is stale or foreign")
}

func TestLoginAttemptsAreRateLimitedPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *console.Config) { c.LoginRate = 3 })
	c := b.anonymous(t)
	_, body := c.get("/login")
	for i := range 3 {
		var code int
		code, body = c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {operatorName}, "password": {"wrong"}})
		require.Equal(t, http.StatusUnauthorized, code, i)
	}
	code, body := c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {operatorName}, "password": {operatorPassword}})
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Contains(t, body, "too many login attempts from your address: wait a minute and try again")
	b.clock.Add(time.Minute)
	_, body = c.get("/login")
	code, _ = c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {operatorName}, "password": {operatorPassword}})
	require.Equal(t, http.StatusSeeOther, code, "a minute later the address may try again")
}

func TestAnExpiredSessionGoesBackToLogin(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *console.Config) { c.SessionTTL = time.Hour })
	c := b.login(t, viewerName, viewerPassword)
	b.clock.Add(59 * time.Minute)
	code, _ := c.get("/overview")
	require.Equal(t, http.StatusOK, code)
	b.clock.Add(time.Minute)
	resp, _ := c.request(http.MethodGet, "/overview", nil, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?m=expired", resp.Header.Get("Location"))
	code, body := c.get("/login?m=expired")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "your session has expired: log in again")
	resp, body = c.request(http.MethodGet, "/api/v1/suppressions", nil, "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.JSONEq(t, `{"error": "your session has expired: log in again", "kind": "unauthenticated"}`, body)
}

func TestAStolenCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("1"))
	before := b.mails(t)
	victim := b.login(t, viewerName, viewerPassword)
	thief := b.login(t, operatorName, operatorPassword)
	require.NotEqual(t, victim.csrf, thief.csrf)
	for _, p := range []string{"/actions/resume/confirm", "/actions/resume", "/search", "/suppressions", "/logout"} {
		code, body := thief.post(p, url.Values{"csrf": {victim.csrf}, "provider": {"smtp"}, "reason": {"x"}, "nonce": {"n"}})
		require.Equal(t, http.StatusForbidden, code, p)
		require.Contains(t, body, "this form&#39;s security token is not your session&#39;s")
		code, _ = thief.post(p, url.Values{"provider": {"smtp"}})
		require.Equal(t, http.StatusForbidden, code, p)
	}
	// The API with the session cookie needs the token in X-CSRF-Token.
	req, _ := http.NewRequest(http.MethodPost, b.base+"/api/v1/providers/smtp/resume", strings.NewReader(`{"reason":"x"}`))
	req.Header.Set("X-CSRF-Token", victim.csrf)
	resp, body := thief.do(req)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, `"kind":"forbidden"`)
	require.Equal(t, before, b.mails(t))
}

func TestAnActionWithoutItsConfirmationIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.login(t, operatorName, operatorPassword)
	code, body := o.post("/actions/resume", url.Values{"csrf": {o.csrf}, "provider": {"smtp"}, "reason": {"test"}, "nonce": {"made-up"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "this confirmation was already used (or has expired): nothing was done again")
	code, body = o.post("/actions/resume", url.Values{"csrf": {o.csrf}, "provider": {"smtp"}, "nonce": {"made-up"}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "reason: required: say why (it goes to the audit log)")
}

func TestATrustedHeaderCountsOnlyFromTheProxy(t *testing.T) {
	t.Parallel()
	proxy := func(cidr string) option {
		return func(c *console.Config) {
			_, n, err := net.ParseCIDR(cidr)
			require.NoError(t, err)
			c.Proxy = console.TrustedProxy{Header: "X-Forwarded-User", RoleHeader: "X-Forwarded-Groups",
				OperatorGroups: []string{"support-leads"}, DefaultRole: console.Viewer, Addresses: []*net.IPNet{n}}
		}
	}
	elsewhere := setup(t, proxy("192.0.2.0/24"))
	c := elsewhere.anonymous(t)
	c.header.Set("X-Forwarded-User", "mallory")
	c.header.Set("X-Forwarded-Groups", "support-leads")
	resp, _ := c.request(http.MethodGet, "/overview", nil, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the header from another address is ignored")
	resp, _ = c.request(http.MethodGet, "/api/v1/suppressions", nil, "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	local := setup(t, proxy("127.0.0.1/32"))
	c = local.anonymous(t)
	c.header.Set("X-Forwarded-User", "pat")
	code, body := c.get("/overview")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pat · viewer")
	resp, _ = c.request(http.MethodPost, "/api/v1/providers/smtp/resume", strings.NewReader(`{"reason":"x"}`), "application/json")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	c.header.Set("X-Forwarded-Groups", "staff, support-leads")
	code, body = c.get("/overview")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pat · operator")
}

func TestLoginAttemptsAreLimitedPerForwardedClientAndPerName(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *console.Config) {
		c.LoginRate = 2
		n := &net.IPNet{IP: net.IPv4(127, 0, 0, 1).To4(), Mask: net.CIDRMask(32, 32)}
		c.Proxy = console.TrustedProxy{Header: "X-Forwarded-User", DefaultRole: console.Viewer, Addresses: []*net.IPNet{n}}
	})
	from := func(addr, name, password string) (int, string) {
		c := b.anonymous(t)
		c.header.Set("X-Forwarded-For", "203.0.113.9, "+addr)
		_, body := c.get("/login")
		return c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {name}, "password": {password}})
	}
	// One attacker behind the proxy, trying many names: refused by address.
	for i, name := range []string{"a", "b"} {
		code, _ := from("198.51.100.1", name, "x")
		require.Equal(t, http.StatusUnauthorized, code, i)
	}
	for range 3 {
		code, body := from("198.51.100.1", "c", "x")
		require.Equal(t, http.StatusTooManyRequests, code)
		require.Contains(t, body, "too many login attempts from your address")
	}
	// Everyone else behind the same proxy still logs in.
	code, _ := from("198.51.100.2", operatorName, operatorPassword)
	require.Equal(t, http.StatusSeeOther, code)
	// One name tried from many addresses: refused by name.
	code, _ = from("198.51.100.3", viewerName, "x")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = from("198.51.100.4", viewerName, "x")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := from("198.51.100.5", viewerName, viewerPassword)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Contains(t, body, "too many login attempts for this name")
	logs := b.logs.String()
	require.Equal(t, 1, strings.Count(logs, "key=client:198.51.100.1"), logs)
	require.Equal(t, 1, strings.Count(logs, "key=user:vera"), logs)
	b.clock.Add(time.Minute)
	code, _ = from("198.51.100.1", "c", "x")
	require.Equal(t, http.StatusUnauthorized, code, "a minute later the address may try again")
}
