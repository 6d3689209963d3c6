package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ReadyCheck is one condition /readyz requires; Check returns nil when met.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// httpServer serves /metrics, /healthz and /readyz.
type httpServer struct {
	srv  *http.Server
	addr string
	ln   net.Listener
	log  *slog.Logger
	// fail reports that the server stopped serving by itself (the process
	// must stop: it would run without probes or metrics).
	fail func(error)
}

// checks is read on every request, so checks added after construction
// count. fail receives the error of a server that stopped serving by
// itself; it must not block.
func newHTTPServer(addr string, g prometheus.Gatherer, checks *[]ReadyCheck, log *slog.Logger, fail func(error)) *httpServer {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		for _, c := range *checks {
			if err := c.Check(ctx); err != nil {
				// Sanitize: one short line, no address (errors never carry secrets).
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "check": c.Name, "reason": mailtype.Sanitize(err.Error())})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return &httpServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		addr: addr,
		log:  log.With("component", "http"),
		fail: fail,
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Start listens on the address and serves in the background. A listen
// error (port taken) is returned.
func (h *httpServer) Start(context.Context) error {
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		return err
	}
	h.addr, h.ln = ln.Addr().String(), ln
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.fail(fmt.Errorf("serve http on %s: %w", h.addr, err))
		}
	}()
	h.log.Info("http listening", "addr", h.addr)
	return nil
}

// Stop shuts the server down gracefully within ctx.
func (h *httpServer) Stop(ctx context.Context) error {
	return h.srv.Shutdown(ctx)
}
