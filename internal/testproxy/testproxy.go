// Package testproxy puts a proxy between mailsvc and a real server, so a
// test can inject a fault without touching the shared server: Proxy
// (Shopify's toxiproxy, as a library) cuts the connection and restores it,
// Hole turns a link silent the way a vanished host does, ReplyCutter
// loses an SMTP server's reply to the end of a message's data, and TxPool
// pools PostgreSQL server connections per transaction as PgBouncer does.
package testproxy

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy forwards a loopback port to an upstream address.
type Proxy struct {
	mu sync.Mutex
	p  *toxiproxy.Proxy
	up bool
	// Addr is host:port of the proxy's listener; it stays the same across
	// Cut and Restore.
	Addr string
}

// New starts a proxy to upstream (host:port) on a free loopback port and
// stops it in t.Cleanup.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.New(io.Discard))
	p := toxiproxy.NewProxy(srv, "p-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy to %s: %v", upstream, err)
	}
	px := &Proxy{p: p, up: true, Addr: p.Listen}
	t.Cleanup(px.Cut)
	return px
}

// Latency delays every chunk the proxy forwards, in both directions, by
// d (whole milliseconds; toxiproxy's latency toxic), so a round trip
// through it takes at least 2d: a server on another host.
func (px *Proxy) Latency(t testing.TB, d time.Duration) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		js := fmt.Sprintf(`{"name":"latency-%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`,
			stream, stream, d.Milliseconds())
		if _, err := px.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatalf("add latency to %s: %v", px.Addr, err)
		}
	}
}

// Cut closes every proxied connection and refuses new ones, like a server
// that went away. Safe to call twice.
func (px *Proxy) Cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.up {
		px.p.Stop()
		px.up = false
	}
}

// Restore accepts connections again on the same address.
func (px *Proxy) Restore(t testing.TB) {
	t.Helper()
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.up {
		return
	}
	px.p.Listen = px.Addr
	if err := px.p.Start(); err != nil {
		t.Fatalf("restore proxy on %s: %v", px.Addr, err)
	}
	px.up = true
}

// RewriteURL returns rawURL with its host:port replaced by the proxy's.
func (px *Proxy) RewriteURL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %s: %v", rawURL, err)
	}
	u.Host = px.Addr
	return u.String()
}

// HostPort returns the host:port of rawURL, defaulting the port to def.
func HostPort(t testing.TB, rawURL, def string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %s: %v", rawURL, err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), def)
	}
	return u.Host
}
