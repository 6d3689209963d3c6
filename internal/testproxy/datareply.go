package testproxy

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// ReplyCutter is an SMTP-aware TCP forwarder between a client and a real
// SMTP server that can lose the server's reply to the end of a message's
// data (the "." line after DATA, RFC 5321 section 4.1.1.4): the server
// takes the message and answers, the reply never reaches the client, and
// both connections are closed. That is the one window in which a client
// cannot know whether the mail was taken (RFC 5321 section 6.1 asks the
// server to deliver a mail it answered 250, whatever happens to the
// reply). Everything else is forwarded as is. Safe for concurrent use.
type ReplyCutter struct {
	// Addr is host:port of the listener.
	Addr string

	upstream string
	ln       net.Listener
	mu       sync.Mutex
	armed    int
	cut      int
	wg       sync.WaitGroup
}

// NewReplyCutter starts a forwarder to upstream (host:port) on a free
// loopback port and closes it, with every connection, in t.Cleanup.
func NewReplyCutter(t testing.TB, upstream string) *ReplyCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reply cutter to %s: listen: %v", upstream, err)
	}
	r := &ReplyCutter{Addr: ln.Addr().String(), upstream: upstream, ln: ln}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		_ = r.ln.Close()
		r.wg.Wait()
	})
	return r
}

// LoseDataReplies arms the cutter for the next n messages, on any
// connection: the server's reply to each one's end of data is lost.
func (r *ReplyCutter) LoseDataReplies(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed += n
}

// Lost returns how many replies were lost so far.
func (r *ReplyCutter) Lost() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut
}

// take uses one armed cut, and reports whether there was one.
func (r *ReplyCutter) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed == 0 {
		return false
	}
	r.armed--
	r.cut++
	return true
}

func (r *ReplyCutter) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		s := &cutSession{r: r, client: c, server: up}
		r.wg.Add(2)
		go s.toServer()
		go s.toClient()
	}
}

// cutSession is one proxied connection.
type cutSession struct {
	r              *ReplyCutter
	client, server net.Conn
	mu             sync.Mutex
	lose           bool // the next reply from the server is lost
	scan           dataScanner
}

func (s *cutSession) close() {
	_ = s.client.Close()
	_ = s.server.Close()
}

// toServer forwards the client's bytes, watching for the end of a
// message's data.
func (s *cutSession) toServer() {
	defer s.r.wg.Done()
	defer s.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.client.Read(buf)
		if n > 0 {
			if s.scan.feed(buf[:n]) > 0 && s.r.take() {
				s.mu.Lock()
				s.lose = true
				s.mu.Unlock()
			}
			if _, werr := s.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// toClient forwards the server's bytes, unless a reply is to be lost:
// then it closes both connections instead.
func (s *cutSession) toClient() {
	defer s.r.wg.Done()
	defer s.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.server.Read(buf)
		if n > 0 {
			s.mu.Lock()
			lose := s.lose
			s.mu.Unlock()
			if lose {
				return
			}
			if _, werr := s.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// dataScanner follows a client's side of an SMTP session: command lines,
// and after a DATA command the message, up to its "CRLF.CRLF" end. It
// counts the ends of data it sees. The client waits for 354 before it
// sends the message (RFC 5321 section 4.1.1.4, and RFC 2920 section 3.1:
// DATA ends a pipelined group), so DATA's line is always followed by the
// message.
type dataScanner struct {
	inData bool
	line   []byte // the command line read so far
	tail   []byte // the message's last bytes, to find CRLF.CRLF across reads
}

// feed reads b and returns how many messages ended in it.
func (d *dataScanner) feed(b []byte) int {
	ends := 0
	for len(b) > 0 {
		if d.inData {
			d.tail = append(d.tail, b...)
			i := bytes.Index(d.tail, []byte("\r\n.\r\n"))
			if i < 0 {
				if len(d.tail) > 4 {
					d.tail = append(d.tail[:0], d.tail[len(d.tail)-4:]...)
				}
				return ends
			}
			consumed := i + 5 - (len(d.tail) - len(b))
			b = b[consumed:]
			d.inData, d.tail, ends = false, nil, ends+1
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			d.line = append(d.line, b...)
			return ends
		}
		d.line = append(d.line, b[:i+1]...)
		b = b[i+1:]
		if bytes.EqualFold(bytes.TrimSpace(d.line), []byte("DATA")) {
			// The message may end at once: its first line can be the dot.
			d.inData, d.tail = true, []byte("\r\n")
		}
		d.line = d.line[:0]
	}
	return ends
}
