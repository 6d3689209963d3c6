package testproxy

import (
	"net"
	"sync"
	"testing"
)

// Hole is a TCP forwarder that can blackhole its link: while blackholed,
// every connection, old and new, stays open and nothing is forwarded in
// either direction, not even a close (a FIN is swallowed), like a network
// partition or a host that vanished without closing TCP. Heal forwards
// again what was held, as TCP would after the partition; Reset closes every
// connection, as a peer's RST would. Safe for concurrent use.
type Hole struct {
	// Addr is host:port of the listener.
	Addr string

	upstream string
	ln       net.Listener
	mu       sync.Mutex
	held     *sync.Cond // on mu: signalled when black turns false
	black    bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewHole starts a forwarder to upstream (host:port) on a free loopback
// port and closes it, with every connection, in t.Cleanup.
func NewHole(t testing.TB, upstream string) *Hole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hole to %s: listen: %v", upstream, err)
	}
	h := &Hole{Addr: ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	h.held = sync.NewCond(&h.mu)
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(h.close)
	return h
}

// Blackhole stops forwarding on every connection and on the new ones it
// accepts. A write already under way finishes (bytes already on the wire).
func (h *Hole) Blackhole() {
	h.mu.Lock()
	h.black = true
	h.mu.Unlock()
}

// Heal forwards again, held bytes and closes included.
func (h *Hole) Heal() {
	h.mu.Lock()
	h.black = false
	h.mu.Unlock()
	h.held.Broadcast()
}

// Reset closes every connection, both sides, and forwards new ones.
func (h *Hole) Reset() {
	h.mu.Lock()
	for c := range h.conns {
		_ = c.Close()
		delete(h.conns, c)
	}
	h.black = false
	h.mu.Unlock()
	h.held.Broadcast()
}

// RewriteURL returns rawURL with its host:port replaced by the hole's.
func (h *Hole) RewriteURL(t testing.TB, rawURL string) string {
	t.Helper()
	return (&Proxy{Addr: h.Addr}).RewriteURL(t, rawURL)
}

func (h *Hole) close() {
	_ = h.ln.Close()
	h.Reset()
	h.wg.Wait()
}

func (h *Hole) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.wg.Add(1)
		go h.serve(c)
	}
}

// track registers c.
func (h *Hole) track(c net.Conn) {
	h.mu.Lock()
	h.conns[c] = struct{}{}
	h.mu.Unlock()
}

func (h *Hole) untrack(cs ...net.Conn) {
	h.mu.Lock()
	for _, c := range cs {
		delete(h.conns, c)
		_ = c.Close()
	}
	h.mu.Unlock()
}

// serve dials upstream once the hole forwards (a connection accepted while
// blackholed waits, open and unanswered) and copies both ways.
func (h *Hole) serve(down net.Conn) {
	defer h.wg.Done()
	h.track(down)
	if !h.wait(down) {
		h.untrack(down)
		return
	}
	up, err := net.Dial("tcp", h.upstream)
	if err != nil {
		h.untrack(down)
		return
	}
	h.track(up)
	var pair sync.WaitGroup
	pair.Add(2)
	go func() { defer pair.Done(); h.copy(up, down) }()
	go func() { defer pair.Done(); h.copy(down, up) }()
	pair.Wait()
	h.untrack(down, up)
}

// wait blocks while blackholed; false when c was closed meanwhile (Reset).
func (h *Hole) wait(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.black {
		h.held.Wait()
	}
	_, open := h.conns[c]
	return open
}

// copy forwards src to dst until either ends, then closes both. What it
// read while blackholed, data or the end of the stream, waits until Heal.
func (h *Hole) copy(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !h.wait(dst) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
