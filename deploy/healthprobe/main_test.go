package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProbeURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"":               "http://127.0.0.1:8080/readyz",
		":8080":          "http://127.0.0.1:8080/readyz",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/readyz",
		"[::]:9001":      "http://127.0.0.1:9001/readyz",
		"127.0.0.2:8081": "http://127.0.0.2:8081/readyz",
		"[::1]:8082":     "http://[::1]:8082/readyz",
	} {
		got, err := probeURL(addr, "readyz")
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
	_, err := probeURL("8080", "/healthz")
	require.ErrorContains(t, err, `MAILSVC_HTTP_ADDR "8080"`)
}

func TestProbe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, `{"status":"not ready","check":"broker"}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	u, err := probeURL(addr, "/healthz")
	require.NoError(t, err)
	require.NoError(t, probe(u))

	u, err = probeURL(addr, "/readyz")
	require.NoError(t, err)
	err = probe(u)
	require.ErrorContains(t, err, "503 Service Unavailable")
	require.ErrorContains(t, err, `"check":"broker"`)

	srv.Close()
	require.Error(t, probe(u), "a closed port is unhealthy")
}
