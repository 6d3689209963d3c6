// Package smtptest is a fault-injecting SMTP server for tests, on
// github.com/emersion/go-smtp: scripted replies per phase (a 451 at DATA,
// a 550 5.1.1 at RCPT, a reply without an enhanced status code,
// a 421 greeting, a connection dropped at RCPT, a DATA that is taken but
// never answered, or answered late), optional STARTTLS or implicit TLS with a throw-away CA
// or a given configuration (a private CA, a client-certificate requirement),
// optional AUTH PLAIN, a server that does not advertise 8BITMIME, and a
// discarding mode for benchmarks and end-to-end tests. It records what it
// took, so tests count deliveries exactly.
package smtptest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Phase is a point of an SMTP session where a fault can be injected.
type Phase int

const (
	// Greeting is the server's first reply, before EHLO.
	Greeting Phase = iota
	// Mail is the reply to MAIL FROM.
	Mail
	// Rcpt is the reply to RCPT TO.
	Rcpt
	// Data is the reply after the message data ended (the final dot).
	Data
)

// Fault is what the server does at a phase instead of answering normally.
type Fault struct {
	kind    faultKind
	code    int
	text    string
	delay   time.Duration
	release <-chan struct{}
	then    *Fault
	// verbatim: the reply is the code and the text, no enhanced status
	// code added.
	verbatim bool
}

type faultKind int

const (
	kindReply faultKind = iota
	kindDrop
	kindHang
	kindDelay
	kindHold
	kindAccept
)

// Reply answers with code (4xx or 5xx) and text. At Data the message is
// not taken.
func Reply(code int, text string) Fault { return Fault{kind: kindReply, code: code, text: text} }

// ReplyText answers with the line "<code> <text>" exactly as given: unlike
// Reply (which prefaces the text with the enhanced status code "X.0.0"
// derived from code, as go-smtp does), nothing is added, so text carries
// its own enhanced status code ("5.1.1 <x> User unknown"), a malformed
// one, or none. At Greeting, Reply and ReplyText are the same. At Data the
// message is not taken.
func ReplyText(code int, text string) Fault {
	return Fault{kind: kindReply, code: code, text: text, verbatim: true}
}

// Drop closes the connection without a reply. At Data the message was
// taken first (delivered): the reply is what got lost.
func Drop() Fault { return Fault{kind: kindDrop} }

// Hang sends no reply and holds the connection until the client closes
// it. At Data the message was taken first (delivered): the server took
// DATA and never replied.
func Hang() Fault { return Fault{kind: kindHang} }

// Delay answers normally, d late. At Data the message is taken first
// (delivered) and the 250 follows d later: a send in flight that a test
// can act on (Delaying). A server closing ends the wait.
func Delay(d time.Duration) Fault { return Fault{kind: kindDelay, delay: d} }

// Accept answers normally: at Data the message is taken and answered 250.
// It is what a Hold does once released, when nothing else should happen.
func Accept() Fault { return Fault{kind: kindAccept} }

// Hold, at Data only, waits with the message read but neither taken nor
// answered until release is closed (or the server closes), then does what
// then says: Accept takes it and answers 250, a Reply refuses it (not
// taken), Drop or Hang take it and lose the reply. A test acts while the
// send is in flight (Delaying counts held sessions) and decides when it
// ends, with no timing involved.
func Hold(release <-chan struct{}, then Fault) Fault {
	return Fault{kind: kindHold, release: release, then: &then}
}

// Options configure a Server.
type Options struct {
	// STARTTLS offers STARTTLS with a certificate for 127.0.0.1.
	STARTTLS bool
	// ImplicitTLS speaks TLS from the first byte.
	ImplicitTLS bool
	// TLSConfig, when set, is the server's TLS configuration for STARTTLS
	// or ImplicitTLS instead of the throw-away self-signed certificate: a
	// private CA's server certificate, and a client-certificate requirement
	// (tlstest.ServerConfig). ClientTLSConfig is nil then.
	TLSConfig *tls.Config
	// No8BITMIME removes 8BITMIME from the EHLO reply (plaintext only).
	No8BITMIME bool
	// Discard counts messages without keeping them (benchmarks).
	Discard bool
	// Username and Password, when set, offer AUTH PLAIN and require it.
	Username, Password string
	// DataDelay, when positive, is how long the server waits after taking
	// a message (the final dot) before it answers 250: the window in
	// which a crash of the client leaves a delivered mail unrecorded, or a
	// slow relay. SetDataDelay changes it while the server runs.
	DataDelay time.Duration
	// MaxConnections, when positive, is the most sessions the server
	// holds at once: a connection beyond it gets "421 4.4.5 Too many
	// connections from your host" as its greeting and is closed, as relays
	// that cap connections per client answer (SocketLabs, for one).
	MaxConnections int
	// LoseReplyFor, when set, is asked for every recipient of a message;
	// for a recipient it reports true for, the server takes the message
	// and never replies (like Hang at Data), on every attempt.
	LoseReplyFor func(rcpt string) bool
}

// Message is one message the server took.
type Message struct {
	From string
	To   []string
	Data []byte
	// TLS reports whether the session was encrypted.
	TLS bool
	// ClientCert is the subject CN of the certificate the client presented,
	// "" when none.
	ClientCert string
	// At is when the server took the message.
	At time.Time
	// ReplyLost is "drop" or "hang" when the server took the message and
	// then lost its reply (the ambiguous outcome), else "".
	ReplyLost string
}

// Server is a running fault-injecting SMTP server. Safe for concurrent use.
type Server struct {
	// Addr is host:port; Host and Port the same, split.
	Addr string
	Host string
	Port int

	opts  Options
	srv   *smtp.Server
	ca    *tls.Config // client side
	mails atomic.Int64
	taken atomic.Int64
	// open counts the sessions held now; refused the connections that
	// MaxConnections turned away.
	open    atomic.Int64
	refused atomic.Int64
	// delaying counts replies held by a Delay now; closed ends them.
	delaying atomic.Int64
	closed   chan struct{}
	// dataDelay is Options.DataDelay, as SetDataDelay left it; inData
	// counts the messages between DATA and its reply now, peakData the
	// most at once since New or ResetPeak.
	dataDelay atomic.Int64
	inData    atomic.Int64
	peakData  atomic.Int64

	mu       sync.Mutex
	faults   map[Phase][]Fault
	msgs     []Message
	password string
	auths    int
}

// New starts a server on a free loopback port and closes it in t.Cleanup.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{opts: o, faults: map[Phase][]Fault{}, closed: make(chan struct{}), password: o.Password}
	s.dataDelay.Store(int64(o.DataDelay))
	be := smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &session{s: s, c: c}, nil })
	s.srv = smtp.NewServer(be)
	s.srv.Domain = "localhost"
	s.srv.AllowInsecureAuth = true
	s.srv.ErrorLog = log.New(io.Discard, "", 0)
	if (o.STARTTLS || o.ImplicitTLS) && o.TLSConfig != nil {
		s.srv.TLSConfig = o.TLSConfig
	} else if o.STARTTLS || o.ImplicitTLS {
		srvTLS, cliTLS, err := selfSigned()
		if err != nil {
			t.Fatalf("smtptest: certificate: %v", err)
		}
		s.ca = cliTLS
		if o.STARTTLS {
			s.srv.TLSConfig = srvTLS
		}
		if o.ImplicitTLS {
			s.srv.TLSConfig = srvTLS
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtptest: listen: %v", err)
	}
	var ln net.Listener = &listener{Listener: l, s: s}
	if o.ImplicitTLS {
		ln = tls.NewListener(ln, s.srv.TLSConfig)
	}
	s.Addr = l.Addr().String()
	host, port, _ := net.SplitHostPort(s.Addr)
	s.Host = host
	s.Port, _ = strconv.Atoi(port)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		close(s.closed)
		_ = s.srv.Close()
		// Serve may not have registered the listener with the server yet.
		_ = l.Close()
		<-done
	})
	return s
}

// ClientTLSConfig trusts the server's certificate; nil without TLS.
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.ca == nil {
		return nil
	}
	return s.ca.Clone()
}

// Inject queues faults at phase p; each fault is used by one session
// reaching p, in order, after which p answers normally again.
func (s *Server) Inject(p Phase, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[p] = append(s.faults[p], faults...)
}

// Queued returns how many faults injected at p are not used yet: 0 means
// a session reached p.
func (s *Server) Queued(p Phase) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults[p])
}

func (s *Server) next(p Phase) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[p]
	if len(q) == 0 {
		return Fault{}, false
	}
	s.faults[p] = q[1:]
	return q[0], true
}

// Messages returns a copy of every message taken so far (none with
// Discard).
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Count returns how many messages the server took (delivered), including
// those whose reply was then lost (Drop or Hang at Data).
func (s *Server) Count() int { return int(s.taken.Load()) }

// Delaying returns how many replies a Delay or a Hold holds back now: at
// Data, each is a message whose reply the client still waits for.
func (s *Server) Delaying() int { return int(s.delaying.Load()) }

// MailCommands returns how many MAIL FROM commands arrived, answered or
// not: 0 proves that no transaction was even started.
func (s *Server) MailCommands() int { return int(s.mails.Load()) }

func (s *Server) take(m Message) {
	s.taken.Add(1)
	if s.opts.Discard {
		return
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()
}

// listener applies Greeting faults and the No8BITMIME rewrite.
type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if max := l.s.opts.MaxConnections; max > 0 {
			if l.s.open.Add(1) > int64(max) {
				l.s.open.Add(-1)
				l.s.refused.Add(1)
				_, _ = io.WriteString(c, "421 4.4.5 Too many connections from your host\r\n")
				_ = c.Close()
				continue
			}
			c = &heldConn{Conn: c, open: &l.s.open}
		}
		f, ok := l.s.next(Greeting)
		if ok && f.kind == kindDelay {
			l.s.delay(f.delay) // holds back the accepts behind it too
			ok = false
		}
		if !ok {
			if l.s.opts.No8BITMIME {
				return &no8bit{Conn: c}, nil
			}
			return c, nil
		}
		switch f.kind {
		case kindReply:
			_, _ = io.WriteString(c, strconv.Itoa(f.code)+" "+f.text+"\r\n")
			_ = c.Close()
		case kindDrop:
			_ = c.Close()
		case kindHang:
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}
}

// heldConn is a session counted against MaxConnections until it closes.
type heldConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *heldConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// Refused is how many connections MaxConnections turned away.
func (s *Server) Refused() int { return int(s.refused.Load()) }

// no8bit hides the 8BITMIME capability from the EHLO reply.
type no8bit struct{ net.Conn }

func (c *no8bit) Write(p []byte) (int, error) {
	q := bytes.ReplaceAll(p, []byte("250-8BITMIME\r\n"), []byte("250-X-NONE\r\n"))
	if _, err := c.Conn.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// session is one SMTP session of the server.
type session struct {
	s    *Server
	c    *smtp.Conn
	from string
	to   []string
}

var errDropped = errors.New("smtptest: connection dropped")

// fault applies the next fault of phase p, if any; it returns the error
// to answer with, or nil to answer normally.
func (se *session) fault(p Phase) error {
	f, ok := se.s.next(p)
	if !ok {
		return nil
	}
	return se.apply(f)
}

func (se *session) apply(f Fault) error {
	switch f.kind {
	case kindReply:
		enhanced := smtp.EnhancedCodeNotSet
		if f.verbatim {
			enhanced = smtp.NoEnhancedCode
		}
		return &smtp.SMTPError{Code: f.code, EnhancedCode: enhanced, Message: f.text}
	case kindDrop:
		_ = se.c.Conn().Close()
	case kindHang:
		// The client sends nothing while it waits for the reply: this read
		// returns when it gives up and closes, or the server closes.
		_, _ = io.Copy(io.Discard, se.c.Conn())
	case kindDelay:
		se.s.delay(f.delay)
		return nil
	case kindAccept, kindHold: // Hold acts at Data only; elsewhere it answers normally
		return nil
	}
	return errDropped
}

// hold waits until release is closed, or the server closes.
func (s *Server) hold(release <-chan struct{}) {
	s.delaying.Add(1)
	defer s.delaying.Add(-1)
	select {
	case <-release:
	case <-s.closed:
	}
}

// delay waits d, or until the server closes.
func (s *Server) delay(d time.Duration) {
	s.delaying.Add(1)
	defer s.delaying.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closed:
	}
}

func (se *session) AuthMechanisms() []string {
	if se.s.opts.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

// SetPassword changes the password AUTH accepts (an operator fixed the
// credentials).
func (s *Server) SetPassword(password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.password = password
}

// Auths returns how many AUTH exchanges the server answered.
func (s *Server) Auths() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auths
}

func (se *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		se.s.mu.Lock()
		want := se.s.password
		se.s.auths++
		se.s.mu.Unlock()
		if user != se.s.opts.Username || pass != want {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		return nil
	}), nil
}

func (se *session) Mail(from string, _ *smtp.MailOptions) error {
	se.s.mails.Add(1)
	if err := se.fault(Mail); err != nil {
		return err
	}
	se.from = from
	return nil
}

func (se *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if err := se.fault(Rcpt); err != nil {
		return err
	}
	se.to = append(se.to, to)
	return nil
}

// SetDataDelay sets Options.DataDelay for the messages that reach DATA
// from now on: a relay that turns slow, or fast again.
func (s *Server) SetDataDelay(d time.Duration) { s.dataDelay.Store(int64(d)) }

// PeakData returns the most messages that were between DATA and its
// reply at once since New or the last ResetPeak: the concurrency of
// sends the server saw.
func (s *Server) PeakData() int { return int(s.peakData.Load()) }

// ResetPeak starts PeakData again from the messages in DATA now.
func (s *Server) ResetPeak() { s.peakData.Store(s.inData.Load()) }

// enterData counts a message in DATA (PeakData); the returned function
// ends it.
func (s *Server) enterData() func() {
	n := s.inData.Add(1)
	for {
		peak := s.peakData.Load()
		if n <= peak || s.peakData.CompareAndSwap(peak, n) {
			break
		}
	}
	return func() { s.inData.Add(-1) }
}

// wait waits d, or until the server closes.
func (s *Server) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closed:
	}
}

func (se *session) Data(r io.Reader) error {
	defer se.s.enterData()()
	var buf bytes.Buffer
	if se.s.opts.Discard {
		_, _ = io.Copy(io.Discard, r)
	} else if _, err := io.Copy(&buf, r); err != nil {
		return err
	}
	st, isTLS := se.c.TLSConnectionState()
	m := Message{From: se.from, To: append([]string(nil), se.to...), Data: buf.Bytes(), TLS: isTLS}
	if len(st.PeerCertificates) > 0 {
		m.ClientCert = st.PeerCertificates[0].Subject.CommonName
	}
	m.At = time.Now()
	if se.loseReply() {
		m.ReplyLost = "hang"
		se.s.take(m)
		return se.apply(Hang())
	}
	f, ok := se.s.next(Data)
	if ok && f.kind == kindHold {
		se.s.hold(f.release)
		f = *f.then
	}
	if ok && f.kind == kindAccept {
		ok = false
	}
	if !ok {
		se.s.take(m)
		if d := time.Duration(se.s.dataDelay.Load()); d > 0 {
			se.s.wait(d) // the server's own slowness, the fault under test
		}
		return nil
	}
	switch f.kind {
	case kindDrop:
		m.ReplyLost = "drop"
		se.s.take(m)
	case kindHang:
		m.ReplyLost = "hang"
		se.s.take(m)
	case kindDelay:
		se.s.take(m)
	}
	return se.apply(f)
}

// loseReply reports whether Options.LoseReplyFor picks a recipient.
func (se *session) loseReply() bool {
	if se.s.opts.LoseReplyFor == nil {
		return false
	}
	for _, to := range se.to {
		if se.s.opts.LoseReplyFor(to) {
			return true
		}
	}
	return false
}

func (se *session) Reset() { se.from, se.to = "", nil }

func (se *session) Logout() error { return nil }
