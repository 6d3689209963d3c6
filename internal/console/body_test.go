package console_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawRequest writes head (no body follows unless in head) on a new
// connection and reads the answer (its body closed), failing past 5 s.
func rawRequest(t *testing.T, b *bundle, head string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestActionBodiesTooLargeTruncatedOrTrailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post := func(body string) (int, map[string]any) {
		c := b.anonymous(t)
		c.header.Set("Authorization", "Bearer "+b.operatorToken)
		resp, text := c.request(http.MethodPost, "/api/v1/dlq/replay", strings.NewReader(body), "application/json")
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(text), &out), text)
		return resp.StatusCode, out
	}
	pad := strings.Repeat(" ", 70<<10)
	code, out := post(`{"reason": "x", "dry_run": true}` + pad)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, map[string]any{"kind": "too_large", "error": "the body is too large: at most 65536 bytes"}, out)
	code, out = post(`{"reason": "x", "dry_run": true}` + strings.Repeat(" ", 66<<10))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, out)
	code, out = post(`{"reason": "x", "dry_run": true} {"reason": "y"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "the body must hold one JSON object: there is more after it", out["error"])
	code, out = post(`{"reason": "x", "dry_run": tr`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "the body is cut short: it ends inside its JSON object", out["error"])

	// A Content-Length past the limit is answered at once, without a body.
	status, text := rawRequest(t, b, fmt.Sprintf("POST /api/v1/dlq/replay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 999999\r\n\r\n", b.operatorToken))
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.JSONEq(t, `{"kind": "too_large", "error": "the body is too large: at most 65536 bytes"}`, text)
}
