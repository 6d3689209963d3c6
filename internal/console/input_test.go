package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBadInputIsA400NamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("4", 1025)
	for query, want := range map[string]string{
		"order_id=" + long: "order_id: longer than 1024 bytes",
		"status=sent,lost": `status: "lost" is none of [pending sending sent failed cancelled unknown held]`,
		"since=yesterday":  `since: "yesterday" is not a time (2026-05-01, 2026-05-01T14:30 in UTC, or RFC 3339)`,
		"page=0":           `page: a number from 1, got "0"`,
		"per_page=500":     `per_page: a number from 1 to 200, got "500"`,
		"sort=random":      `sort: newest or oldest, got "random"`,
		"orderid=42":       `unknown search parameter "orderid"`,
		"template=%FF":     "template: not valid UTF-8",
	} {
		code, out := b.api(t, b.viewerToken, "GET", "/api/v1/mails?"+query, nil)
		require.Equal(t, http.StatusBadRequest, code, query)
		require.Equal(t, "invalid", out["kind"], query)
		require.Contains(t, out["error"], want, query)
	}
	code, out := b.api(t, b.viewerToken, "GET", "/api/v1/audit?limit=none", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, `limit: a number from 1 to 1000, got "none"`, out["error"])
	code, out = b.api(t, b.viewerToken, "GET", "/api/v1/nowhere", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "no such API route: GET /api/v1/nowhere", out["error"])
	code, out = b.api(t, b.operatorToken, "POST", "/api/v1/providers/smtp/resume", "not an object")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"], `the body must be a JSON object like {"reason": "...", "dry_run": false}`)
	code, out = b.api(t, b.operatorToken, "POST", "/api/v1/providers/smtp/resume", map[string]any{"reason": " ", "dry_run": true})
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "reason: required: say why (it goes to the audit log)", out["error"])
	code, out = b.api(t, b.operatorToken, "POST", "/api/v1/providers/smtp/resume", map[string]any{"reason": "x", "force": true})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"], "force")

	v := b.login(t, operatorName, operatorPassword)
	code, body := v.get("/search?recipient=ann@example.com")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "recipient: send it with the search form (POST), not in the URL")
	code, body = v.post("/search", url.Values{"csrf": {v.csrf}, "order_id": {long}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "order_id: longer than 1024 bytes")
	code, body = v.get("/actions/launch?key=x")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `no action &#34;launch&#34;`)
	code, body = v.get("/actions/resume")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "provider: required (smtp or resend)")
}
