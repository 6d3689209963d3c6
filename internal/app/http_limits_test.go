package app

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/httpguard"
)

// The probe port carries httpguard.Probes' limits (the write timeout
// lifted only when profiles are served, whose CPU profile lasts its
// ?seconds=), and refuses a request with Transfer-Encoding and closes.
func TestProbePortHasItsLimits(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, prometheus.NewRegistry(), &[]ReadyCheck{}, slog.New(slog.DiscardHandler))
	want := httpguard.Probes
	require.Equal(t, want.IdleTimeout, h.srv.IdleTimeout)
	require.Equal(t, want.ReadTimeout, h.srv.ReadTimeout)
	require.Equal(t, want.ReadHeaderTimeout, h.srv.ReadHeaderTimeout)
	require.Equal(t, want.WriteTimeout, h.srv.WriteTimeout)
	require.Equal(t, want.MaxHeaderBytes, h.srv.MaxHeaderBytes)
	require.Equal(t, want, h.limits)
	p := startHTTPWith(t, config.HTTP{Pprof: true}, prometheus.NewRegistry(), &[]ReadyCheck{}, slog.New(slog.DiscardHandler))
	require.Equal(t, time.Duration(0), p.srv.WriteTimeout)

	c, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	br := bufio.NewReader(c)
	r, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer r.Body.Close()
	require.Equal(t, http.StatusLengthRequired, r.StatusCode)
	_, _ = io.ReadAll(r.Body)
	_, err = br.Peek(1)
	require.ErrorIs(t, err, io.EOF, "the smuggled request was served") // no response: closed
}
