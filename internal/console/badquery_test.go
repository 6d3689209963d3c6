package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestMalformedOrRepeatedQueryParametersAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storetest.Mail{OrderID: "o1"})
	b.insertSent(t, storetest.Mail{OrderID: "o2"})
	for path, want := range map[string]string{
		"/api/v1/mails?order_id=%zz":                 `the query string is malformed (invalid URL escape "%zz")`,
		"/api/v1/mails?order_id=a;b":                 "the query string is malformed (invalid semicolon separator in query)",
		"/api/v1/mails?order_id=o1&order_id=o2":      "order_id: given 2 times: give it once",
		"/api/v1/audit?actor=ann&colour=red":         `unknown parameter "colour" (known: actor, action, target, dedupe_key, limit)`,
		"/api/v1/audit?actor=a&actor=b":              "actor: given 2 times: give it once",
		"/api/v1/audit?actor=%zz":                    "the query string is malformed",
		"/api/v1/suppressions?colour=red":            `unknown parameter "colour" (known: address)`,
		"/api/v1/suppressions?address=a@b.example;x": "the query string is malformed",
		"/api/v1/overview?a=%zz":                     "the query string is malformed",
		"/api/v1/mails/order-confirmed:o1?a;b":       "the query string is malformed",
		"/api/v1/orders/o1/mails?a=%zz":              "the query string is malformed",
		"/api/v1/audit?actor=a%00":                   "actor: contains a NUL byte",
	} {
		code, out := b.api(t, b.viewerToken, http.MethodGet, path, nil)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.Contains(t, out["error"], want[:min(len(want), 60)], path)
	}
	c := b.login(t, operatorName, operatorPassword)
	for _, path := range []string{"/search?order_id=%zz", "/search?order_id=a;b", "/search?order_id=o1&order_id=o2",
		"/audit?actor=%zz", "/audit?colour=red", "/actions/resend?key=%zz", "/audit?actor=%00", "/audit?action=bogus",
		"/overview?a=%zz", "/orders/o1?a;b", "/suppressions?a=%zz"} {
		code, body := c.get(path)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.Contains(t, body, "That input cannot be used", path)
	}
	// An address in the URL of an action: refused, as the search refuses it.
	code, body := c.get("/actions/suppress?address=" + url.QueryEscape("ann@example.com"))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "address: send it with the form (POST), not in the URL")
	code, _ = c.post("/actions/suppress/confirm", url.Values{"csrf": {c.csrf}, "address": {"ann@example.com"}})
	require.Equal(t, http.StatusOK, code)
}

func TestUnavailableAnswersAreLoggedWithPathAndKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, "ALTER TABLE audit_log RENAME TO audit_log_gone")
	code, out := b.api(t, b.viewerToken, http.MethodGet, "/api/v1/audit?actor=ann%40example.com", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unavailable", out["kind"])
	require.Equal(t, "the database or the broker is unavailable: try again shortly (the details are in mailsvc's log)", out["error"],
		"neither the database's host nor its user for a viewer")
	c := b.login(t, viewerName, viewerPassword)
	code, body := c.get("/audit")
	require.Equal(t, http.StatusOK, code, "the page shows the part's error in its place")
	require.Contains(t, body, "the database or the broker is unavailable")
	require.NotContains(t, body, "audit_log", "no statement or relation for a viewer")
	logs := b.logs.String()
	require.Contains(t, logs, `level=WARN msg="console api" status=503 path=/api/v1/audit kind=unavailable`)
	require.Contains(t, logs, `level=WARN msg="console read" status=503 kind=unavailable`)
	require.NotContains(t, logs, "ann%40example.com")
	require.NotContains(t, logs, "ann@example.com")
}

func TestStaticServesOnlyTheStylesheet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.anonymous(t)
	code, body := c.get("/static/console.css")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "{")
	for _, p := range []string{"/static/", "/static", "/static/other.css", "/static/templates/login.html"} {
		code, body = c.get(p)
		require.Equal(t, http.StatusNotFound, code, p)
		require.NotContains(t, body, "console.css", p)
	}
}

func TestAMalformedFormIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.login(t, viewerName, viewerPassword)
	resp, body := c.request(http.MethodPost, "/search", strings.NewReader("csrf="+url.QueryEscape(c.csrf)+"&order_id=%zz"),
		"application/x-www-form-urlencoded")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "the form is malformed (invalid URL escape &#34;%zz&#34;)")
}
