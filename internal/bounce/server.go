package bounce

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/net/netutil"

	"github.com/mailsvc/mailsvc/internal/lifecycle"
	"github.com/mailsvc/mailsvc/internal/store"
)

// ProviderSMTP is the provider label of the reports this listener takes.
const ProviderSMTP = "smtp"

// Config configures the bounce listener (bounces.*).
type Config struct {
	// Addr is the listen address, host:port (bounces.addr).
	Addr string
	// Verp makes and reads the VERP addresses (bounces.address,
	// bounces.secret).
	Verp Verp
	// Hostname is the name the listener greets with; "" means the Verp
	// domain.
	Hostname string
	// TLS, when set, is offered with STARTTLS (bounces.tls_cert_file,
	// bounces.tls_key_file).
	TLS *tls.Config
	// MaxMessageBytes bounds one report; 0 means 1 MiB (mailsvc asks for
	// reports with the headers of the mail only, RET=HDRS).
	MaxMessageBytes int64
	// MaxConns is the most connections served at once; 0 means 64.
	MaxConns int
	// MaxMessagesPerSession bounds the reports one connection may
	// deliver; 0 means 100.
	MaxMessagesPerSession int
	// Timeout bounds each read and write of a connection; 0 means 30 s.
	Timeout time.Duration
	// StoreTimeout bounds recording one report; 0 means 10 s.
	StoreTimeout time.Duration
	// SessionTimeout bounds a whole connection, however slowly it sends;
	// 0 means 2 minutes.
	SessionTimeout time.Duration
	// MaxConnsPerIP is the most connections one client address holds at
	// once; 0 means 8. Further ones are closed at once.
	MaxConnsPerIP int
	// AcceptDelivered records success reports (Action: delivered); off, a
	// report mailsvc did not ask for (bounces.notify without SUCCESS)
	// changes nothing.
	AcceptDelivered bool
}

// WithDefaults fills the zero fields that have defaults.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConns, 64)
	def(&c.MaxMessagesPerSession, 100)
	def(&c.MaxConnsPerIP, 8)
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 2 * time.Minute
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 10 * time.Second
	}
	if c.Hostname == "" {
		c.Hostname = c.Verp.Domain
	}
	return c
}

// Recorder records a report once; *store.Store implements it.
type Recorder interface {
	RecordWebhook(ctx context.Context, w store.Webhook) (store.WebhookResult, error)
}

// Deps are the listener's collaborators; Log and Metrics may be nil.
type Deps struct {
	Store   Recorder
	Metrics *Metrics
	Log     *slog.Logger
	// OnOutboxWritten wakes the relay after a report wrote events.
	OnOutboxWritten func()
}

// Server is the bounce listener: SMTP for the VERP domain only. A server
// that stops serving by itself has failed (Done, Err).
type Server struct {
	cfg  Config
	deps Deps
	srv  *smtp.Server
	addr string
	life lifecycle.Life
}

// New builds the listener. It fails when Addr is empty or the VERP
// address is not configured.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if cfg.Addr == "" || !cfg.Verp.On() {
		return nil, errors.New("bounce listener: bounces.addr, bounces.address and bounces.secret are all required")
	}
	s := &Server{cfg: cfg, deps: fillDeps(deps), addr: cfg.Addr}
	srv := smtp.NewServer(backend{s})
	srv.Domain, srv.TLSConfig = cfg.Hostname, cfg.TLS
	srv.MaxMessageBytes, srv.MaxRecipients, srv.MaxLineLength = cfg.MaxMessageBytes, 10, 2000
	srv.ReadTimeout, srv.WriteTimeout = cfg.Timeout, cfg.Timeout
	srv.ErrorLog = slogLogger{s.deps.Log}
	s.srv = srv
	return s, nil
}

// fillDeps gives deps a discarding log and unregistered metrics where
// they are nil.
func fillDeps(deps Deps) Deps {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	deps.Log = deps.Log.With("component", "bounces")
	return deps
}

// Addr is the address the listener listens on once started.
func (s *Server) Addr() string { return s.addr }

// Start listens and serves in the background (internal/lifecycle).
func (s *Server) Start(ctx context.Context) error {
	return s.life.StartFunc(ctx, func(context.Context) (lifecycle.Func, error) {
		ln, err := net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("bounces: %w", err)
		}
		s.addr = ln.Addr().String()
		s.deps.Log.Info("bounce listener ready", "addr", s.addr, "domain", s.cfg.Verp.Domain, "starttls", s.cfg.TLS != nil)
		ln = &perIPListener{Listener: netutil.LimitListener(ln, s.cfg.MaxConns), max: s.cfg.MaxConnsPerIP, open: map[string]int{}}
		return func(stop, abort context.Context) error { return s.serve(ln, stop, abort) }, nil
	})
}

func (s *Server) serve(ln net.Listener, stop, abort context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve bounces on %s: %w", s.addr, err)
	case <-stop.Done():
	}
	err := s.srv.Shutdown(abort)
	if err != nil {
		_ = s.srv.Close()
	}
	<-served
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

// Stop shuts the listener down gracefully within ctx.
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Done is closed once the listener has stopped; Err then says why.
func (s *Server) Done() <-chan struct{} { return s.life.Done() }

// Err is what ended the listener, nil while it serves.
func (s *Server) Err() error { return s.life.Err() }

type backend struct{ s *Server }

// NewSession starts a session whose connection is closed after
// SessionTimeout, however slowly its client sends: a slow sender cannot
// hold a connection slot.
func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	se := &session{s: b.s}
	se.deadline = time.AfterFunc(b.s.cfg.SessionTimeout, func() { _ = c.Close() })
	return se, nil
}

// session takes reports for VERP addresses; every other recipient is
// refused as a relay attempt.
type session struct {
	s        *Server
	mails    []int64
	messages int
	deadline *time.Timer
}

func (se *session) Reset() { se.mails = nil }

func (se *session) Logout() error {
	se.deadline.Stop()
	return nil
}

func (se *session) Mail(string, *smtp.MailOptions) error {
	if se.messages >= se.s.cfg.MaxMessagesPerSession {
		se.s.deps.Metrics.Refused.WithLabelValues("session_limit").Inc()
		return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "too many reports on one connection"}
	}
	return nil
}

func (se *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	id, err := se.s.cfg.Verp.Parse(to)
	switch {
	case errors.Is(err, ErrNotOurs):
		se.s.deps.Metrics.Refused.WithLabelValues("relay").Inc()
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "relay access denied: this server takes reports for its own addresses only"}
	case err != nil:
		se.s.deps.Metrics.Refused.WithLabelValues("bad_token").Inc()
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such bounce address"}
	}
	se.mails = append(se.mails, id)
	return nil
}

func (se *session) Data(r io.Reader) error {
	se.messages++
	body, err := io.ReadAll(r)
	if err != nil {
		if errors.Is(err, smtp.ErrDataTooLarge) {
			se.s.deps.Metrics.Refused.WithLabelValues("too_large").Inc()
		}
		return err
	}
	rep := ParseDSN(bytes.NewReader(body))
	if rep.Verdict == Delivered && !se.s.cfg.AcceptDelivered {
		se.s.deps.Metrics.Refused.WithLabelValues("not_asked").Inc()
		return nil // taken and dropped: mailsvc did not ask for success reports
	}
	for _, id := range se.mails {
		if err := se.s.record(id, rep); err != nil {
			se.s.deps.Metrics.Refused.WithLabelValues("error").Inc()
			se.s.deps.Log.Error("report not recorded; the sender will retry", "mail_id", id, "error", err)
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "cannot record the report now, try again later"}
		}
	}
	return nil
}

// record writes one report about mail id, once per verdict and status:
// copies of a report, however their headers differ, change nothing more.
func (s *Server) record(id int64, rep Report) error {
	w := Webhook(id, rep, time.Now().UTC())
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
	defer cancel()
	got, err := s.deps.Store.RecordWebhook(ctx, w)
	if err != nil {
		return err
	}
	if !got.Duplicate {
		s.deps.Metrics.Reports.WithLabelValues(string(rep.Verdict), strconv.FormatBool(got.Matched > 0)).Inc()
	}
	s.deps.Log.Info("bounce report recorded", "mail_id", id, "verdict", rep.Verdict, "status", rep.Status,
		"matched", got.Matched, "duplicate", got.Duplicate)
	if len(got.Events) > 0 && s.deps.OnOutboxWritten != nil {
		s.deps.OnOutboxWritten()
	}
	return nil
}

// Webhook is the store record of report rep about mail id, received at:
// recorded once per mail, verdict and status (its id), matched by the
// mail's id among the mails sent over SMTP, in the vocabulary of the
// provider webhooks (a failed report is an email.bounced, a delivery an
// email.delivered).
func Webhook(id int64, rep Report, at time.Time) store.Webhook {
	w := store.Webhook{Provider: ProviderSMTP, At: at, MailID: id, BounceSubtype: rep.Status,
		ID: "dsn:" + strconv.FormatInt(id, 10) + ":" + string(rep.Verdict) + ":" + rep.Status}
	switch rep.Verdict {
	case Delivered:
		w.Type, w.Effect = "email.delivered", store.EffectDelivered
	case Delayed:
		w.Type, w.Effect = "email.delivery_delayed", store.EffectDelayed
	default:
		w.Type, w.Effect, w.BounceType = "email.bounced", store.EffectBounced, string(rep.Verdict)
		w.Reason = fmt.Sprintf("%s bounce %s: %s", rep.Verdict, rep.Status, rep.Diagnostic)
		if rep.Status == "" {
			w.Reason = fmt.Sprintf("%s bounce: the report gives no status", rep.Verdict)
		}
	}
	return w
}

// slogLogger is go-smtp's error log on slog, at debug: a client that
// hangs up is no error of mailsvc.
type slogLogger struct{ log *slog.Logger }

func (l slogLogger) Printf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l slogLogger) Println(v ...any)               { l.log.Debug(fmt.Sprint(v...)) }

// perIPListener closes a connection at once when its client address
// already holds max of them.
type perIPListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		if l.open[ip] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *perIPListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// countedConn releases its slot once, at its first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
