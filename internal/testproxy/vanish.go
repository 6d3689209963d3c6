package testproxy

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Vanishing is a plain TCP proxy whose far side can vanish the way a
// crashed host or a partition does: after Vanish it keeps every connection
// open on both sides, forwards nothing in either direction, and swallows
// the FIN of a side that closes (the other side never learns of it).
// Connections accepted after Vanish are held the same way. TCP keepalives
// sent to it are answered by this machine's kernel, so a peer's keepalive
// cannot tell the link is dead. Everything is closed in t.Cleanup.
type Vanishing struct {
	// Addr is host:port of the proxy's listener.
	Addr     string
	upstream string
	ln       net.Listener
	wg       sync.WaitGroup

	mu       sync.Mutex
	vanished bool
	closed   bool
	conns    []net.Conn
}

// NewVanishing starts a proxy to upstream (host:port) on a free loopback
// port and closes it, and every connection it holds, in t.Cleanup.
func NewVanishing(t testing.TB, upstream string) *Vanishing {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for proxy to %s: %v", upstream, err)
	}
	v := &Vanishing{Addr: ln.Addr().String(), upstream: upstream, ln: ln}
	v.wg.Add(1)
	go v.accept()
	t.Cleanup(v.close)
	return v
}

// Vanish stops all forwarding for good, leaving every connection open.
// Safe to call twice.
func (v *Vanishing) Vanish() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.vanished = true
}

// RewriteURL returns rawURL with its host:port replaced by the proxy's.
func (v *Vanishing) RewriteURL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %s: %v", rawURL, err)
	}
	u.Host = v.Addr
	return u.String()
}

func (v *Vanishing) accept() {
	defer v.wg.Done()
	for {
		c, err := v.ln.Accept()
		if err != nil {
			return
		}
		if !v.hold(c) || v.isVanished() {
			continue // held, never dialled through
		}
		up, err := net.Dial("tcp", v.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !v.hold(up) {
			continue
		}
		v.wg.Add(2)
		go v.pipe(up, c)
		go v.pipe(c, up)
	}
}

// hold registers c for closing at cleanup; false if cleanup already ran.
func (v *Vanishing) hold(c net.Conn) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		_ = c.Close()
		return false
	}
	v.conns = append(v.conns, c)
	return true
}

func (v *Vanishing) isVanished() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.vanished
}

// pipe copies src to dst until src ends. Once vanished it reads and drops,
// and when src then closes it leaves dst open.
func (v *Vanishing) pipe(dst, src net.Conn) {
	defer v.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !v.isVanished() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !v.isVanished() {
				_ = dst.Close()
				_ = src.Close()
			}
			return
		}
	}
}

func (v *Vanishing) close() {
	v.mu.Lock()
	v.closed = true
	conns := v.conns
	v.conns = nil
	v.mu.Unlock()
	_ = v.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	v.wg.Wait()
}
