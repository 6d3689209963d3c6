package tlstest

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Terminator is a TLS-terminating proxy: it accepts TLS on a loopback port
// with the server configuration it was given (tlstest.ServerConfig, which
// may require a client certificate), and only after a complete handshake
// dials upstream and forwards the decrypted bytes there in plain, both
// ways. A client whose handshake fails never reaches upstream: Forwarded
// stays 0. Safe for concurrent use.
type Terminator struct {
	// Addr is the proxy's host:port.
	Addr string

	upstream  string
	tls       *tls.Config
	ln        net.Listener
	sessions  atomic.Int64
	refused   atomic.Int64
	forwarded atomic.Int64

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	lastErr error
	peers   []string
	wg      sync.WaitGroup
}

// NewTerminator starts a Terminator in front of upstream (host:port) and
// stops it, closing every connection, in t.Cleanup.
func NewTerminator(t testing.TB, server *tls.Config, upstream string) *Terminator {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tlstest: listen: %v", err)
	}
	p := &Terminator{Addr: ln.Addr().String(), upstream: upstream, tls: server, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Sessions returns how many clients completed the handshake and were
// forwarded upstream.
func (p *Terminator) Sessions() int { return int(p.sessions.Load()) }

// Refused returns how many handshakes failed.
func (p *Terminator) Refused() int { return int(p.refused.Load()) }

// Forwarded returns how many bytes clients sent upstream, decrypted.
func (p *Terminator) Forwarded() int64 { return p.forwarded.Load() }

// Open returns how many proxied sessions are still open: a count of
// Forwarded is final once it is 0 (a client's Close returns before the
// proxy has copied its last frames).
func (p *Terminator) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// LastError is the error of the last failed handshake, nil if none failed.
func (p *Terminator) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Peers returns the subject CN of each forwarded client's certificate, in
// the order their sessions started.
func (p *Terminator) Peers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.peers...)
}

func (p *Terminator) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

func (p *Terminator) handle(raw net.Conn) {
	tc := tls.Server(raw, p.tls)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.refused.Add(1)
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	p.sessions.Add(1)
	cn := ""
	if st := tc.ConnectionState(); len(st.PeerCertificates) > 0 {
		cn = st.PeerCertificates[0].Subject.CommonName
	}
	p.mu.Lock()
	p.peers = append(p.peers, cn)
	p.mu.Unlock()
	pipe(up, tc, &p.forwarded)
}

// pipe copies both ways until either side ends, counting the bytes that
// went from client to upstream as each write completes, then closes both.
func pipe(up, client net.Conn, counted *atomic.Int64) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(&counter{w: up, n: counted}, client)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		done <- struct{}{}
	}()
	<-done
	_ = up.Close()
	_ = client.Close()
	<-done
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (p *Terminator) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Terminator) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Terminator) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// Recorder is a plain TCP forwarder that keeps every byte a client sent
// to upstream, so a test can prove what went over the wire in clear.
// Safe for concurrent use.
type Recorder struct {
	// Addr is the recorder's host:port.
	Addr string

	upstream string
	ln       net.Listener
	mu       sync.Mutex
	sent     bytes.Buffer
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	n        atomic.Int64
}

// NewRecorder starts a Recorder in front of upstream (host:port) and stops
// it in t.Cleanup.
func NewRecorder(t testing.TB, upstream string) *Recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tlstest: listen: %v", err)
	}
	r := &Recorder{Addr: ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(r.close)
	return r
}

// Sent returns a copy of every byte clients sent so far, all connections
// in arrival order of the writes.
func (r *Recorder) Sent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.sent.Bytes())
}

// Connections returns how many clients connected.
func (r *Recorder) Connections() int { return int(r.n.Load()) }

func (r *Recorder) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.n.Add(1)
		up, err := net.DialTimeout("tcp", r.upstream, 10*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !r.track(c, up) {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.untrack(c, up)
			var none atomic.Int64
			pipe(up, &recording{Conn: c, r: r}, &none)
		}()
	}
}

// recording keeps what is read from the client.
type recording struct {
	net.Conn
	r *Recorder
}

func (c *recording) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.r.mu.Lock()
		c.r.sent.Write(b[:n])
		c.r.mu.Unlock()
	}
	return n, err
}

func (r *Recorder) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Recorder) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(r.conns, c)
	}
}

func (r *Recorder) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
