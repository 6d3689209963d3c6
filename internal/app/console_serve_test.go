package app

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// TestServeStartsTheConsoleOnItsOwnListener: with console.addr set, serve
// runs the console beside the probes; it answers a trusted proxy's user,
// reads the dead-letter queue's depth from the broker, and serves neither
// the metrics nor the probes, which stay on http.addr.
func TestServeStartsTheConsoleOnItsOwnListener(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	d := startDaemon(t, secretConfig(t, sc, testproxy.HostPort(t, sc.URL, "5432"), n, map[string]string{
		"MAILSVC_CONSOLE_ADDR": "127.0.0.1:0", "MAILSVC_CONSOLE_TRUSTED_PROXY_HEADER": "X-Forwarded-User",
		"MAILSVC_CONSOLE_TRUSTED_PROXY_ADDRESSES": "127.0.0.1",
	}))
	addr := d.part(t, "console").(*console.Server).Addr()
	ask := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-User", "pat")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := ask("/suppressions")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pat · viewer")
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		code, _ = ask(p)
		require.Equal(t, http.StatusNotFound, code, p)
	}
	code, _ = get(t, d.http.addr, "/metrics")
	require.Equal(t, http.StatusOK, code, "the metrics stay on http.addr")
	require.Eventually(t, func() bool {
		code, body = ask("/api/v1/overview")
		var o struct {
			DLQ *int `json:"dead_letter_depth"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &o) == nil && o.DLQ != nil && *o.DLQ == 0
	}, 30*time.Second, 100*time.Millisecond, "the dead-letter queue's depth, once the consumer declared it: %s", body)
	require.Contains(t, d.logs.String(), "console.session_secret is not set")
}
