package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestOverviewListsTheConfiguredProvidersOnceInSnakeCase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sc.Exec(t, `UPDATE provider_state SET pause_reason = 'quota', paused_at = '2026-05-01T10:00:00Z',
		paused_until = '2099-05-01T11:00:00Z', pause_error = 'quota used up', failures = 2 WHERE provider = 'resend'`)
	b.providers = []string{"resend"}
	c := b.anonymous(t)
	c.base = b.start(t, b.cfg)
	c.header.Set("Authorization", "Bearer "+b.viewerToken)
	resp, text := c.request(http.MethodGet, "/api/v1/overview", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, text)
	require.NotContains(t, text, `"Provider"`)
	require.NotContains(t, text, `"smtp"`)
	code, out := b.api(t, b.viewerToken, http.MethodGet, "/api/v1/overview", nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, out["overview"], "providers", "listed once, beside the figures")
	require.Len(t, out["providers"], 2, "all of them when none is configured")
	require.Equal(t, map[string]any{"provider": "smtp", "paused": false, "reason": "", "paused_at": nil, "paused_until": nil,
		"resumed_at": nil, "error": "", "failures": float64(0), "probe_by": ""}, out["providers"].([]any)[1])
	require.Contains(t, text, `"providers":[{"provider":"resend","paused":true,"reason":"quota","paused_at":"2026-05-01T10:00:00Z","paused_until":"2099-05-01T11:00:00Z","resumed_at":null,"error":"quota used up","failures":2,"probe_by":""}]`)
}

func TestAPIShapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.insertSent(t, storetest.Mail{OrderID: "s1"})
	// A dry run writes no audit row, and shows none.
	code, out := b.api(t, b.operatorToken, http.MethodPost, "/api/v1/mails/"+key+"/resend", map[string]any{"reason": "x", "dry_run": true})
	require.Equal(t, http.StatusOK, code, out)
	require.NotContains(t, out, "audit")
	require.Contains(t, out["summary"], "dry run")
	code, out = b.api(t, b.operatorToken, http.MethodPost, "/api/v1/mails/"+key+"/resend", map[string]any{"reason": "x"})
	require.Equal(t, http.StatusOK, code, out)
	require.NotZero(t, out["audit"].(map[string]any)["id"])

	code, out = b.api(t, b.viewerToken, http.MethodGet, "/api/v1/orders/%20/mails", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "order id: empty (only spaces): give the order's id", out["error"])

	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id, revision)
		VALUES ('order-confirmed:t1', 't1', 'order_confirmed', 'cancelled', gen_random_uuid(), 1)`)
	code, out = b.api(t, b.viewerToken, http.MethodGet, "/api/v1/mails/order-confirmed:t1/content", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "this mail has no content: a tombstone (the order was cancelled before its confirmation arrived)", out["error"])
	v := b.login(t, viewerName, viewerPassword)
	code, body := v.get("/mails/order-confirmed:t1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "this mail has no content: a tombstone")
	code, _ = v.get("/mails/order-confirmed:t1/preview")
	require.Equal(t, http.StatusNotFound, code)

	c := b.anonymous(t)
	c.header.Set("Authorization", "Bearer "+b.operatorToken)
	resp, text := c.request(http.MethodPut, "/api/v1/dlq/replay", nil, "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, text)
	require.Equal(t, "POST", resp.Header.Get("Allow"))
	require.JSONEq(t, `{"kind": "method_not_allowed", "error": "PUT is not allowed on /api/v1/dlq/replay: use POST"}`, text)
	resp, _ = c.request(http.MethodPut, "/api/v1/suppressions", nil, "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, POST, DELETE", resp.Header.Get("Allow"))
}
