package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/httpguard"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ReadyCheck is one condition /readyz requires; Check returns nil when met.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// httpServer serves /metrics, /healthz and /readyz, and with
// config.HTTP.Pprof Go's profiles under /debug/pprof/. A server that stops
// serving by itself has failed (Done, Err): the process must stop, since it
// would run without probes or metrics.
type httpServer struct {
	srv   *http.Server
	addr  string
	pprof bool
	ln    net.Listener
	log   *slog.Logger
	life  lifecycle.Life
	// endRequests cancels the context of every request, at the start of a
	// stop: a long request that heeds it (a CPU profile or trace, which
	// lasts its ?seconds=) then ends at once instead of holding up the
	// graceful shutdown until its budget runs out.
	endRequests context.CancelFunc
	limits      httpguard.Limits
}

// checks is read on every request, so checks added after construction
// count.
func newHTTPServer(cfg config.HTTP, g prometheus.Gatherer, checks *[]ReadyCheck, log *slog.Logger) *httpServer {
	mux := http.NewServeMux()
	if cfg.Pprof {
		// pprof.Index serves the named profiles (heap, goroutine, ...) as well.
		// Importing net/http/pprof also registers these on
		// http.DefaultServeMux, which no server of mailsvc serves (the
		// webhook listener, the one facing the internet, has its own mux).
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		// POST too: `go tool pprof` posts the addresses to symbolize.
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
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
	requests, endRequests := context.WithCancel(context.Background())
	limits := httpguard.Probes
	if cfg.Pprof {
		limits.WriteTimeout = 0 // a CPU profile or trace lasts its ?seconds=
	}
	return &httpServer{
		srv:  httpguard.Server(limits, mux, requests),
		addr: cfg.Addr, pprof: cfg.Pprof, endRequests: endRequests, limits: limits,
		log: log.With("component", "http"),
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Start listens on the address and serves in the background, by the
// rules of internal/lifecycle. A listen error (port taken) is returned.
func (h *httpServer) Start(ctx context.Context) error {
	return h.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		ln, err := httpguard.Listen(h.addr, h.limits)
		if err != nil {
			return nil, err
		}
		h.addr, h.ln = ln.Addr().String(), ln
		h.log.Info("http listening", "addr", h.addr, "pprof", h.pprof)
		return func(stop, abort context.Context) error { return h.serve(ln, stop, abort) }, nil
	})
}

// serve serves until stop, then ends the requests in flight (their
// contexts) and shuts down gracefully until abort, when the connections
// still open are closed. A Serve that ends by itself is
// the returned error.
func (h *httpServer) serve(ln net.Listener, stop, abort context.Context) error {
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve http on %s: %w", h.addr, err)
	case <-stop.Done():
	}
	h.endRequests()
	err := h.srv.Shutdown(abort)
	if err != nil {
		_ = h.srv.Close()
	}
	<-served // http.ErrServerClosed, at once after Shutdown
	return err
}

// Stop shuts the server down gracefully within ctx (lifecycle.Life.Stop).
func (h *httpServer) Stop(ctx context.Context) error {
	return h.life.Stop(ctx)
}

// Done is closed once the server has stopped serving; Err then says why.
func (h *httpServer) Done() <-chan struct{} { return h.life.Done() }

// Err is what ended the server, nil while it serves (lifecycle.Life.Err).
func (h *httpServer) Err() error { return h.life.Err() }
