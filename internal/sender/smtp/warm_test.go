package smtp_test

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// scripted is a minimal SMTP server whose behaviour between transactions
// a test sets, for what smtptest (go-smtp) cannot do: a server that
// announces its close after a delivered mail, one that takes a given
// number of messages per connection, one that wants RSET between
// transactions.
type scripted struct {
	t    *testing.T
	ln   net.Listener
	wg   sync.WaitGroup
	host string
	port int
	// closeAfterData closes the connection after the 250 of a message's
	// DATA, first writing afterData when it is not "".
	closeAfterData bool
	afterData      string
	// perConn, when positive, is how many messages a connection takes: the
	// next MAIL FROM is answered 421 and the connection closed (Exim's
	// smtp_accept_max_per_connection).
	perConn int
	// requireRset answers a MAIL FROM that follows a finished transaction
	// without RSET in between with 503 (bad sequence of commands).
	requireRset bool
	// pipelining advertises PIPELINING (RFC 2920).
	pipelining bool
	// rcptReply, when not "", answers every RCPT TO; acceptDataAnyway then
	// answers DATA 354 even after a refused recipient (a server RFC 2920,
	// section 3.1, warns clients about).
	rcptReply        string
	acceptDataAnyway bool
	// mailReply, when not "", answers every MAIL FROM, dataReply
	// the DATA command (instead of 354, no data mode), dotReply the final
	// dot (the message counts as taken whatever it says); split writes
	// every reply one byte at a time; multiline makes 250/354 replies
	// multi-line.
	mailReply, dataReply, dotReply string
	split, multiline               bool
	// resetAfter354 answers DATA 354 and resets the connection (RST)
	// without reading any of the message: it takes nothing.
	resetAfter354 bool

	mu    sync.Mutex
	conns int
	mails int
	taken int
	noops int
	// grouped counts the MAIL FROM commands read with more of the client's
	// commands already waiting behind them (sent without waiting for the
	// reply); data counts the message lines read after any DATA.
	grouped int
	data    int
}

func newScripted(t *testing.T, configure func(s *scripted)) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &scripted{t: t, ln: ln}
	configure(s)
	a := ln.Addr().(*net.TCPAddr)
	s.host, s.port = a.IP.String(), a.Port
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *scripted) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.session(c)
		}()
	}
}

// counts returns connections accepted, MAIL FROM commands, messages taken
// and NOOPs.
func (s *scripted) counts() (conns, mails, taken, noops int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.mails, s.taken, s.noops
}

// shutdown stops the server and waits for its sessions to end, so that
// its counts are final.
func (s *scripted) shutdown() {
	_ = s.ln.Close()
	s.wg.Wait()
}

// sendAll sends a mail for each key on one session, each within 5 s,
// closes the session and shuts the server down, so that its counts are
// final.
func (s *scripted) sendAll(t *testing.T, keys ...string) {
	t.Helper()
	sess := s.provider(t).NewSession()
	for _, k := range keys {
		require.NoError(t, send(t, sess, k, 5*time.Second), k)
	}
	require.NoError(t, sess.Close())
	s.shutdown()
}

// lines returns the MAIL FROM commands that came grouped with the next
// commands, and the message lines read.
func (s *scripted) lines() (grouped, data int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grouped, s.data
}

func (s *scripted) session(c net.Conn) {
	r := bufio.NewReader(c)
	w := func(line string) bool {
		if s.multiline && (strings.HasPrefix(line, "250 ") || strings.HasPrefix(line, "354 ")) {
			line = line[:3] + "-first line\r\n" + line[:3] + "-second line\r\n" + line
		}
		if s.split {
			for _, b := range []byte(line + "\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return false
				}
				time.Sleep(200 * time.Microsecond)
			}
			return true
		}
		_, err := c.Write([]byte(line + "\r\n"))
		return err == nil
	}
	if !w("220 scripted ESMTP") {
		return
	}
	taken, dirty := 0, false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
			ext := "250-scripted\r\n250-8BITMIME\r\n"
			if s.pipelining {
				ext += "250-PIPELINING\r\n"
			}
			w(ext + "250 ENHANCEDSTATUSCODES")
		case strings.HasPrefix(cmd, "MAIL FROM:"):
			s.mu.Lock()
			s.mails++
			if r.Buffered() > 0 {
				s.grouped++
			}
			s.mu.Unlock()
			switch {
			case s.perConn > 0 && taken >= s.perConn:
				w("421 4.7.0 too many messages in this connection")
				return
			case s.requireRset && dirty:
				w("503 5.5.1 RSET first")
				continue
			case s.mailReply != "":
				w(s.mailReply)
				continue
			}
			w("250 2.1.0 ok")
		case strings.HasPrefix(cmd, "RCPT TO:"):
			if s.rcptReply != "" {
				w(s.rcptReply)
				continue
			}
			w("250 2.1.5 ok")
		case cmd == "DATA":
			if s.rcptReply != "" && !s.acceptDataAnyway {
				w("554 5.5.1 no valid recipients")
				continue
			}
			if s.dataReply != "" {
				w(s.dataReply)
				continue
			}
			if s.resetAfter354 {
				w("354 go ahead")
				_ = c.(*net.TCPConn).SetLinger(0)
				return
			}
			w("354 go ahead")
			if !s.readData(r) {
				return
			}
			if s.rcptReply != "" {
				w("554 5.5.1 no valid recipients")
				continue
			}
			s.mu.Lock()
			s.taken++
			s.mu.Unlock()
			taken++
			dirty = true
			if s.dotReply != "" {
				w(s.dotReply)
			} else {
				w("250 2.0.0 queued as x")
			}
			if s.closeAfterData {
				if s.afterData != "" {
					w(s.afterData)
				}
				return
			}
		case cmd == "RSET":
			dirty = false
			w("250 2.0.0 ok")
		case cmd == "NOOP":
			s.mu.Lock()
			s.noops++
			s.mu.Unlock()
			w("250 2.0.0 ok")
		case cmd == "QUIT":
			w("221 2.0.0 bye")
			return
		default:
			w("502 5.5.2 unknown")
		}
	}
}

// readData reads message lines up to the lone dot, counting them; false
// when the connection ended first.
func (s *scripted) readData(r *bufio.Reader) bool {
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if l == ".\r\n" {
			return true
		}
		s.mu.Lock()
		s.data++
		s.mu.Unlock()
	}
}

func (s *scripted) provider(t *testing.T) *smtp.Provider {
	t.Helper()
	p, err := smtp.New(smtp.Config{Host: s.host, Port: s.port, TLS: smtp.TLSNone, HELO: "test.local"})
	require.NoError(t, err)
	return p
}

// TestWarmConnectionOverAfterDelivery: a server may end a connection right
// after a delivered mail, saying so with a 421 (RFC 5321, 3.8 and 4.2.2:
// "421 ... closing transmission channel", a reply to any command), or
// take a limited number of messages per connection and answer the next
// MAIL FROM with 421. Either way the next mail was not sent and a new
// connection takes it: no mail is deferred (or rerouted to a fallback
// provider) for it, and each is taken once.
func TestWarmConnectionOverAfterDelivery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		configure func(s *scripted)
	}{
		{"421 after the 250 of DATA, then close", func(s *scripted) {
			s.closeAfterData, s.afterData = true, "421 4.4.2 closing connection"
		}},
		{"close after the 250 of DATA", func(s *scripted) { s.closeAfterData = true }},
		{"one message per connection, 421 to the next MAIL FROM", func(s *scripted) { s.perConn = 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newScripted(t, c.configure)
			s := srv.provider(t).NewSession()
			defer s.Close()
			for _, k := range []string{"k:1", "k:2", "k:3"} {
				require.NoError(t, send(t, s, k, 5*time.Second), k)
			}
			_, _, taken, _ := srv.counts()
			require.Equal(t, 3, taken)
		})
	}
}

// TestServerWantingRsetBetweenTransactions: RFC 5321 lets a new MAIL
// follow the end of mail data, but a server that answers it 503 (bad
// sequence) has refused no mail: the mail goes on a new connection, and is
// never reported as rejected.
func TestServerWantingRsetBetweenTransactions(t *testing.T) {
	t.Parallel()
	srv := newScripted(t, func(s *scripted) { s.requireRset = true })
	s := srv.provider(t).NewSession()
	defer s.Close()
	for _, k := range []string{"k:1", "k:2", "k:3"} {
		err := send(t, s, k, 5*time.Second)
		require.NoError(t, err, "%s: %v (class %v)", k, err, mailtype.ClassOf(err))
	}
	_, _, taken, _ := srv.counts()
	require.Equal(t, 3, taken)
}

// TestWarmConnectionClosedAtRcpt: a warm connection whose server closes
// after accepting MAIL FROM fails that mail as transient (no data was
// sent), without a second try in the call, and the next mail goes on a new
// connection.
func TestWarmConnectionClosedAtRcpt(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	s := newProvider(t, srv, smtp.TLSNone).NewSession()
	defer s.Close()
	require.NoError(t, send(t, s, "k:1", 5*time.Second))
	srv.Inject(smtptest.Rcpt, smtptest.Drop())
	err := send(t, s, "k:2", 5*time.Second)
	require.Error(t, err)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
	require.Equal(t, 2, srv.MailCommands(), "no second MAIL FROM for k:2 in the same call")
	require.NoError(t, send(t, s, "k:3", 5*time.Second))
	require.Equal(t, 2, srv.Count())
}
