package testproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// TxPool is a small PostgreSQL transaction pooler, as PgBouncer in
// pool_mode=transaction behaves: a client holds a server connection only
// from its first message until the server is idle again outside a
// transaction (ReadyForQuery 'I' with every Sync answered), and then the
// next transaction may run on another server connection, one just used by
// another client. Server connections are opened up to the limit and then
// handed out oldest-idle first, so two transactions in a row of one client
// land on different servers whenever more than one is idle. Session state (advisory locks, LISTEN,
// prepared statements, SET) therefore does not follow a client; pgx needs
// default_query_exec_mode=exec or simple_protocol through it.
//
// Every server connection is opened with the startup message of the first
// client (all clients must use one database, user and search_path) and
// trust authentication; cancel requests are refused. Everything is closed
// in t.Cleanup.
type TxPool struct {
	// Addr is host:port of the pooler's listener.
	Addr     string
	upstream string
	ln       net.Listener
	idle     chan *txBackend
	slots    chan struct{} // one per server connection that may be opened
	done     chan struct{} // closed by cleanup
	wg       sync.WaitGroup

	mu        sync.Mutex
	startup   []byte // the first client's startup message
	handshake []byte // what the first server said after it, up to ReadyForQuery
	conns     map[net.Conn]struct{}
	closed    bool
}

type txBackend struct{ conn net.Conn }

// Protocol codes of the startup packet and message types used here.
const (
	protoV3         = 196608
	sslRequest      = 80877103
	gssencRequest   = 80877104
	cancelRequest   = 80877102
	msgReadyForQury = 'Z'
	msgSync         = 'S'
	msgQuery        = 'Q'
	msgTerminate    = 'X'
)

// NewTxPool starts a pooler in front of upstream (host:port) with at most
// servers server connections, on a free loopback port.
func NewTxPool(t testing.TB, upstream string, servers int) *TxPool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for pooler to %s: %v", upstream, err)
	}
	p := &TxPool{
		Addr: ln.Addr().String(), upstream: upstream, ln: ln,
		idle: make(chan *txBackend, servers), slots: make(chan struct{}, servers),
		done: make(chan struct{}), conns: map[net.Conn]struct{}{},
	}
	for range servers {
		p.slots <- struct{}{}
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// RewriteURL returns rawURL with its host:port replaced by the pooler's.
func (p *TxPool) RewriteURL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %s: %v", rawURL, err)
	}
	u.Host = p.Addr
	return u.String()
}

func (p *TxPool) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.serve(c)
		}()
	}
}

// serve runs one client connection: startup, then messages until it ends.
func (p *TxPool) serve(c net.Conn) {
	startup, err := readStartup(c)
	if err != nil {
		return
	}
	hs, err := p.greeting(startup)
	if err != nil {
		return
	}
	s := &txSession{p: p, client: c}
	if s.write(hs) != nil {
		return
	}
	for {
		msg, err := readMessage(c)
		if err != nil || msg[0] == msgTerminate {
			s.detach()
			return
		}
		if err := s.send(msg); err != nil {
			return
		}
	}
}

// greeting returns the server's answer to a startup, opening the first
// server connection on the first call.
func (p *TxPool) greeting(startup []byte) ([]byte, error) {
	p.mu.Lock()
	if p.handshake != nil {
		defer p.mu.Unlock()
		return p.handshake, nil
	}
	p.startup = startup
	p.mu.Unlock()
	b, err := p.acquire()
	if err != nil {
		return nil, err
	}
	p.release(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handshake, nil
}

// acquire opens a server connection while a slot is free, and otherwise
// takes the oldest idle one or waits: the pool fills up at once and then
// rotates, so consecutive transactions change servers.
func (p *TxPool) acquire() (*txBackend, error) {
	select {
	case <-p.slots:
		return p.dialSlot()
	default:
	}
	select {
	case <-p.done:
		return nil, errors.New("pooler closed")
	case b := <-p.idle:
		return b, nil
	case <-p.slots:
		return p.dialSlot()
	}
}

// dialSlot opens a server connection in a slot just taken, giving the slot
// back when it fails.
func (p *TxPool) dialSlot() (*txBackend, error) {
	b, err := p.dial()
	if err != nil {
		p.slots <- struct{}{}
	}
	return b, err
}

// release puts a clean server connection back at the end of the queue.
func (p *TxPool) release(b *txBackend) { p.idle <- b }

// discard closes a server connection left in an unknown state.
func (p *TxPool) discard(b *txBackend) {
	_ = b.conn.Close()
	p.slots <- struct{}{}
}

// dial opens a server connection and runs its startup to ReadyForQuery.
func (p *TxPool) dial() (*txBackend, error) {
	p.mu.Lock()
	startup := p.startup
	p.mu.Unlock()
	conn, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	if !p.track(conn) {
		return nil, errors.New("pooler closed")
	}
	hs, err := runStartup(conn, startup)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	p.mu.Lock()
	if p.handshake == nil {
		p.handshake = hs
	}
	p.mu.Unlock()
	return &txBackend{conn: conn}, nil
}

// runStartup sends startup and reads up to ReadyForQuery, which it returns
// with everything before it. Only trust authentication is supported.
func runStartup(conn net.Conn, startup []byte) ([]byte, error) {
	if _, err := conn.Write(startup); err != nil {
		return nil, err
	}
	var hs []byte
	for {
		msg, err := readMessage(conn)
		if err != nil {
			return nil, err
		}
		switch {
		case msg[0] == 'E':
			return nil, fmt.Errorf("server refused the startup: %q", msg[5:])
		case msg[0] == 'R' && binary.BigEndian.Uint32(msg[5:9]) != 0:
			return nil, errors.New("server asks for a password: only trust authentication is supported")
		}
		hs = append(hs, msg...)
		if msg[0] == msgReadyForQury {
			return hs, nil
		}
	}
}

func (p *TxPool) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TxPool) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *TxPool) close() {
	p.mu.Lock()
	p.closed = true
	close(p.done)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// readStartup reads the client's startup message, refusing SSL and GSS
// encryption (the client goes on in plain text) and dropping a cancel
// request.
func readStartup(c net.Conn) ([]byte, error) {
	for {
		var head [8]byte
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return nil, err
		}
		n := binary.BigEndian.Uint32(head[:4])
		if n < 8 || n > 10000 {
			return nil, fmt.Errorf("startup packet of %d bytes", n)
		}
		msg := make([]byte, n)
		copy(msg, head[:])
		if _, err := io.ReadFull(c, msg[8:]); err != nil {
			return nil, err
		}
		switch binary.BigEndian.Uint32(head[4:]) {
		case sslRequest, gssencRequest:
			if _, err := c.Write([]byte{'N'}); err != nil {
				return nil, err
			}
		case protoV3:
			return msg, nil
		default: // cancel request, or an unknown protocol
			return nil, errors.New("not a startup message")
		}
	}
}

// readMessage reads one typed message (type byte, int32 length, body).
func readMessage(c net.Conn) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return nil, fmt.Errorf("message of %d bytes", n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	if _, err := io.ReadFull(c, msg[5:]); err != nil {
		return nil, err
	}
	return msg, nil
}
