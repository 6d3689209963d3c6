// Package console is mailsvc's support console: server-rendered web pages
// and a JSON API (under /api/v1) that answer "did the customer get their
// mail?" and take the operator actions (resend, reconcile, provider
// resume, suppression add and remove, dead-letter replay) through
// internal/operator, so that they refuse exactly as the CLI does and are
// written to the audit log. It runs on a listener of its own
// (console.addr), bounded by internal/httpguard, and serves nothing else:
// no /metrics, no probe, no webhook. docs/console.md describes it.
//
// Who may do what: a request is authenticated by an API token (Bearer),
// a header of a trusted reverse proxy (from its addresses only) or a
// signed session cookie from the login page; a viewer reads, an operator
// also acts. Every POST of a session carries its CSRF token, and a page's
// action its one-time confirmation nonce.
package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Reader is what the console reads from the store; *store.Store
// implements it.
type Reader interface {
	SearchMails(ctx context.Context, q store.MailQuery) (store.MailPage, error)
	MailByKey(ctx context.Context, key string) (store.MailView, error)
	MailTimeline(ctx context.Context, key string) ([]store.TimelineEntry, error)
	MailContentByKey(ctx context.Context, key string) (store.MailContent, error)
	MailsByOrder(ctx context.Context, orderID string) ([]store.MailView, error)
	Overview(ctx context.Context) (store.Overview, error)
	ProviderStates(ctx context.Context) ([]store.ProviderState, error)
	Suppressions(ctx context.Context) ([]store.Suppression, error)
	SuppressionHistoryOf(ctx context.Context, address string) (store.SuppressionHistory, error)
	ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEntry, error)
}

// Actions are the operator actions; *operator.Actions implements them.
// dryRun decides and refuses as the action would, and changes nothing.
type Actions interface {
	ResendWith(ctx context.Context, who operator.Actor, key, reason string, dryRun bool, o operator.ResendOptions) (operator.Result, error)
	Reconcile(ctx context.Context, who operator.Actor, key string, delivered bool, reason string, dryRun bool) (operator.Result, error)
	ResumeProvider(ctx context.Context, who operator.Actor, provider, reason string, dryRun bool) (operator.Result, error)
	Suppress(ctx context.Context, who operator.Actor, address, reason string, dryRun bool) (operator.Result, error)
	Unsuppress(ctx context.Context, who operator.Actor, address, reason string, dryRun bool) (operator.Result, error)
	ReplayDeadLetters(ctx context.Context, who operator.Actor, reason string, dryRun bool) (operator.Result, error)
}

// Role is what an authenticated person may do.
type Role string

// The roles: a viewer sees everything, an operator also acts.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
)

// Credential is one login or API token (console.users, console.tokens).
type Credential struct {
	Name string
	Role Role
	// Hash is a bcrypt hash (users) or the raw 32-byte SHA-256 of the
	// token (tokens).
	Hash []byte
}

// TrustedProxy believes a user header from a reverse proxy that
// authenticated the person, and only from Addresses.
type TrustedProxy struct {
	Header, RoleHeader string
	OperatorGroups     []string
	DefaultRole        Role
	Addresses          []*net.IPNet
}

// Config is the console's configuration (config.Console, parsed).
type Config struct {
	// Addr is the listen address; "127.0.0.1:0" picks a port (Addr()).
	Addr   string
	Users  []Credential
	Tokens []Credential
	Proxy  TrustedProxy
	// SessionSecret signs cookies and CSRF tokens; at least 32 bytes, or
	// nil for a random one (a session cookie and its forms are then
	// accepted by this process only).
	SessionSecret []byte
	// SessionTTL bounds a login; 0 means 8h.
	SessionTTL time.Duration
	// LoginRate is the login attempts allowed per client address per
	// minute; 0 means 10.
	LoginRate int
}

// Deps are what the console works on. DLQDepth is nil where the broker
// is not known: the overview then says "unknown".
type Deps struct {
	Store   Reader
	Actions Actions
	// DLQDepth returns the dead-letter queue's depth; ok false when
	// unknown.
	DLQDepth func(ctx context.Context) (depth int, ok bool)
	// Providers are the configured providers, in order: the overview
	// lists only theirs (nil: every provider with a state).
	Providers []string
	// Sessions keeps the logins; nil means Store, when it implements
	// SessionStore (*store.Store does).
	Sessions SessionStore
	Log      *slog.Logger
	// Now is the clock (time.Now when nil): session expiry and verdicts.
	Now func() time.Time
}

// Console serves the pages and the API. It is safe for concurrent use.
type Console struct {
	cfg      Config
	deps     Deps
	sessions *sessions
	logins   *limiter
	pages    *pages
	mux      *http.ServeMux
	dummy    []byte // dummyHash
}

// New builds the console; it serves nothing until Handler is served
// (Server does). An invalid Config (a short secret) is an error.
func New(cfg Config, deps Deps) (*Console, error) {
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.LoginRate == 0 {
		cfg.LoginRate = 10
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Store == nil || deps.Actions == nil {
		return nil, errors.New("console: Store and Actions are required")
	}
	if deps.Sessions == nil {
		deps.Sessions, _ = deps.Store.(SessionStore)
	}
	if deps.Sessions == nil {
		return nil, errors.New("console: Sessions is required (Store does not keep sessions)")
	}
	s, err := newSessions(cfg.SessionSecret, cfg.SessionTTL, deps.Now, deps.Sessions)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	p, err := loadPages()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{cfg: cfg, deps: deps, sessions: s, logins: newLimiter(cfg.LoginRate, deps.Now), pages: p,
		dummy: dummyHash(cfg.Users)}
	c.mux = c.routes()
	return c, nil
}

// Handler is the console's whole HTTP surface, security headers included.
func (c *Console) Handler() http.Handler { return secure(c.tooLarge(c.mux)) }
