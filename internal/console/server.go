package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/mailsvc/mailsvc/internal/httpguard"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
)

// Limits are the console listener's: a few people and helpdesk tools;
// forms and action bodies are small (1 KiB fields), and a search answers
// within the database's time.
var Limits = httpguard.Limits{
	MaxConns:          128,
	MaxHeaderBytes:    16 << 10,
	MaxBodyBytes:      64 << 10,
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       15 * time.Second,
	WriteTimeout:      30 * time.Second,
	IdleTimeout:       60 * time.Second,
}

// requestTimeout bounds the work of one request (its context).
const requestTimeout = 20 * time.Second

// Server serves a Console on its own listener. Start and Stop follow
// internal/lifecycle; a Server that stops serving by itself has failed
// (Done, Err).
type Server struct {
	c    *Console
	addr string
	srv  *http.Server
	end  context.CancelFunc
	life lifecycle.Life
}

// NewServer returns the server of c on addr; nothing listens until Start.
func NewServer(c *Console, addr string) *Server {
	base, end := context.WithCancel(context.Background())
	// The security headers go on first, so that a timeout's answer has them too.
	h := secure(c.tooLarge(http.TimeoutHandler(c.mux, requestTimeout, "the console took too long to answer: try again")))
	return &Server{c: c, addr: addr, srv: httpguard.Server(Limits, h, base), end: end}
}

// Start listens and serves in the background; a listen error (port
// taken) is returned.
func (s *Server) Start(ctx context.Context) error {
	return s.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		ln, err := httpguard.Listen(s.addr, Limits)
		if err != nil {
			return nil, err
		}
		s.addr = ln.Addr().String()
		s.c.deps.Log.Info("console listening", "addr", s.addr)
		return func(stop, abort context.Context) error { return s.serve(ln, stop, abort) }, nil
	})
}

func (s *Server) serve(ln net.Listener, stop, abort context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve the console on %s: %w", s.addr, err)
	case <-stop.Done():
	}
	s.end()
	err := s.srv.Shutdown(abort)
	if err != nil {
		_ = s.srv.Close()
	}
	<-served
	return err
}

// Addr is the listen address, the real port once started.
func (s *Server) Addr() string { return s.addr }

// Stop shuts the server down within ctx; idempotent.
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Done is closed once the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.life.Done() }

// Err is what ended the server.
func (s *Server) Err() error { return s.life.Err() }
