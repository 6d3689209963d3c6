// Package webhook receives what a provider learns about a mail after
// accepting it: Resend's webhooks (every email.* type, each handled on
// purpose: parseResend) on POST /webhooks/resend, on a listener of its own
// (webhooks.addr) so that /metrics and /readyz never face the internet.
// Each request is verified the Standard Webhooks way before anything is
// read from it (the svix library, which only this package imports), then
// recorded once by its webhook id (store.RecordWebhook), acting on the
// mail it names only: deliveries set delivered_at, bounces and failures
// make a sent mail failed, permanent bounces, complaints and the
// provider's suppressions put the mail's recipient on the suppression
// list, and each writes its feedback event to the outbox.
// The server is a long-lived component (internal/lifecycle); it also
// forgets webhook ids older than the retention window.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	svix "github.com/svix/svix-webhooks/go"

	"github.com/mailsvc/mailsvc/internal/httpguard"
	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Config configures the webhook server.
type Config struct {
	// Addr is the listen address, host:port (webhooks.addr).
	Addr string
	// ResendSecret is the signing secret of the Resend webhook endpoint,
	// "whsec_" followed by base64 (webhooks.resend_secret).
	ResendSecret mailtype.Secret
	// RetentionWindow is how long webhook ids are remembered
	// (retention.window): a redelivery within it is a duplicate.
	RetentionWindow time.Duration
	// PurgeInterval is how often old webhook ids are deleted; 0 means 10m.
	PurgeInterval time.Duration
	// MaxBodyBytes is the largest body read; 0 means 256 KiB (a Resend
	// event is about 1 KiB).
	MaxBodyBytes int64
	// StoreTimeout bounds recording one webhook; 0 means 10s, well inside
	// the time a provider waits for an answer.
	StoreTimeout time.Duration
}

// WithDefaults fills the zero fields that have defaults.
func (c Config) WithDefaults() Config {
	if c.PurgeInterval <= 0 {
		c.PurgeInterval = 10 * time.Minute
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 256 << 10
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 10 * time.Second
	}
	return c
}

// Store is what the server needs of the database; *store.Store
// implements it.
type Store interface {
	Recorder
	DeleteOldWebhooks(ctx context.Context, window time.Duration, limit int) (int64, error)
}

// Deps are the server's collaborators. Log and Metrics may be nil.
type Deps struct {
	Store   Store
	Metrics *Metrics
	Log     *slog.Logger
	// OnOutboxWritten is called after a webhook wrote feedback events
	// (wakes the relay); may be nil.
	OnOutboxWritten func()
}

// Server is the webhook listener. A server that stops serving by itself
// has failed (Done, Err), which stops the daemon.
type Server struct {
	cfg     Config
	deps    Deps
	handler http.Handler
	addr    string
	life    lifecycle.Life
}

// purgeBatch bounds one delete of old webhook ids.
const purgeBatch = 1000

// New builds the server. It fails when the secret is not "whsec_" and
// base64 (the error never shows the secret) or Addr is empty.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if cfg.Addr == "" {
		return nil, errors.New("webhook server: no listen address")
	}
	v, err := svix.NewWebhook(cfg.ResendSecret.Reveal())
	if err != nil || cfg.ResendSecret == "" {
		return nil, errors.New("webhook server: the Resend signing secret is not whsec_ followed by base64")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	deps.Log = deps.Log.With("component", "webhooks")
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/resend", &resendHandler{verifier: v, rec: deps.Store, metrics: deps.Metrics,
		log: deps.Log, cfg: cfg, onOutbox: deps.OnOutboxWritten})
	return &Server{cfg: cfg, deps: deps, handler: mux, addr: cfg.Addr}, nil
}

// Handler is the server's HTTP handler (for tests that serve it
// themselves).
func (s *Server) Handler() http.Handler { return s.handler }

// Addr is the address the server listens on, once started (the port
// chosen for ":0").
func (s *Server) Addr() string { return s.addr }

// Start listens on Config.Addr and serves in the background, by the rules
// of internal/lifecycle. A listen error (port taken) is returned.
func (s *Server) Start(ctx context.Context) error {
	return s.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		ln, err := httpguard.Listen(s.cfg.Addr, s.limits())
		if err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		s.addr = ln.Addr().String()
		s.deps.Log.Info("webhooks listening", "addr", s.addr, "path", "/webhooks/resend")
		return func(stop, abort context.Context) error { return s.serve(ln, stop, abort) }, nil
	})
}

// limits are httpguard.Webhooks with the configured body size.
func (s *Server) limits() httpguard.Limits {
	l := httpguard.Webhooks
	l.MaxBodyBytes = s.cfg.MaxBodyBytes
	return l
}

// serve serves and purges until stop, then shuts down gracefully until
// abort. A Serve that ends by itself is the returned error.
func (s *Server) serve(ln net.Listener, stop, abort context.Context) error {
	srv := httpguard.Server(s.limits(), s.handler, nil)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tick := time.NewTicker(s.cfg.PurgeInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve webhooks on %s: %w", s.addr, err)
		case <-tick.C:
			s.purge(stop)
		case <-stop.Done():
			err := srv.Shutdown(abort)
			if err != nil {
				_ = srv.Close()
			}
			<-served
			return err
		}
	}
}

// purge forgets the webhook ids older than the retention window, a batch
// at a time; a database error waits for the next tick.
func (s *Server) purge(ctx context.Context) {
	if s.cfg.RetentionWindow <= 0 {
		return
	}
	for ctx.Err() == nil {
		n, err := s.deps.Store.DeleteOldWebhooks(ctx, s.cfg.RetentionWindow, purgeBatch)
		if err != nil {
			s.deps.Log.Warn("delete old webhook ids", "error", err)
			return
		}
		if n < purgeBatch {
			return
		}
	}
}

// Stop shuts the server down gracefully within ctx (lifecycle.Life.Stop).
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Done is closed once the server has stopped; Err then says why.
func (s *Server) Done() <-chan struct{} { return s.life.Done() }

// Err is what ended the server, nil while it serves.
func (s *Server) Err() error { return s.life.Err() }

var _ Store = (*store.Store)(nil)
