// Package httpguard bounds what one HTTP listener of mailsvc accepts, so
// that no client, slow or large, careless or hostile, can exhaust the
// process: a cap on open connections, a header size, timeouts for the
// header, the whole request, the response and an idle keep-alive, and a
// body size. Request bodies
// must be sent with Content-Length: a request with Transfer-Encoding is
// answered 411 and its connection closed, which also refuses the request
// smuggling pattern of RFC 9112 §6.3 (Content-Length and
// Transfer-Encoding together: Go's server drops the Content-Length and
// would serve it, and the next request on the connection). Every
// listener of mailsvc (probes and metrics, webhooks) is opened here;
// docs/threat-model.md lists them with their limits.
package httpguard

import (
	"context"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound one listener. Every field must be positive.
type Limits struct {
	// MaxConns is the number of connections served at once; a further
	// client waits in the kernel's accept backlog until one closes.
	MaxConns int
	// MaxHeaderBytes bounds the request line and headers, in bytes; more
	// is answered 431. net/http allows 4 KiB of slack above it, so 431
	// starts at MaxHeaderBytes + 4 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body, in bytes: a body that runs past
	// it fails the handler's read, and the connection is closed.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading the request line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included: a
	// trickled body is cut off there.
	ReadTimeout time.Duration
	// WriteTimeout bounds the response, from the end of the request's
	// headers; 0 means none (the probe port when Go's CPU profile, which
	// lasts its ?seconds=, is served).
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration
}

// Probes are the limits of http.addr (/healthz, /readyz, /metrics and the
// optional profiles): a scraper and a kubelet, a few connections each.
// A client that holds connections open without finishing a header keeps
// each for ReadHeaderTimeout: the cap is high and that timeout short so
// that a probe (kubelet waits 1 s by default) still gets in under such a
// flood from inside the cluster.
var Probes = Limits{
	MaxConns:          256,
	MaxHeaderBytes:    16 << 10,
	MaxBodyBytes:      64 << 10, // pprof/symbol's address list
	ReadHeaderTimeout: 2 * time.Second,
	ReadTimeout:       10 * time.Second,
	WriteTimeout:      30 * time.Second,
	IdleTimeout:       30 * time.Second,
}

// Webhooks are the limits of webhooks.addr, the listener that faces the
// internet. A Resend event is about 1 KiB with headers under 2 KiB;
// Resend waits 15 s for an answer before it retries (Svix's timeout).
var Webhooks = Limits{
	MaxConns:          128,
	MaxHeaderBytes:    16 << 10,
	MaxBodyBytes:      256 << 10,
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       15 * time.Second,
	WriteTimeout:      20 * time.Second,
	IdleTimeout:       60 * time.Second,
}

// MemoryBound is what a listener may hold at worst, in bytes: per
// connection its header buffer (MaxHeaderBytes plus net/http's 4 KiB
// slack), the connection's 4 KiB read and write buffers and a body of
// MaxBodyBytes that a handler reads whole. The process's heap under a
// flood grows by at most this, and Go's collector may let RSS grow to
// about twice it (GOGC=100).
func (l Limits) MemoryBound() int64 {
	perConn := int64(l.MaxHeaderBytes) + 4<<10 + 8<<10 + l.MaxBodyBytes
	return int64(l.MaxConns) * perConn
}

// Listen listens on addr (TCP) with at most l.MaxConns connections open.
func Listen(addr string, l Limits) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, l.MaxConns), nil
}

// Server returns an http.Server with l's limits and timeouts around h
// (Guard), whose requests' contexts derive from base (nil: Background).
func Server(l Limits, h http.Handler, base context.Context) *http.Server {
	if base == nil {
		base = context.Background()
	}
	return &http.Server{
		Handler:           Guard(l, h),
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
}

// Guard refuses, and closes the connection after, a request with
// Transfer-Encoding (411 Length Required: bodies come with
// Content-Length), and closes it after every HTTP/1.0 request. It caps the body of the others at l.MaxBodyBytes: a
// read past it fails (*http.MaxBytesError, which the handler answers,
// e.g. 413) and the connection is closed after the response.
func Guard(l Limits, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			refuse(w, http.StatusLengthRequired, "send the body with Content-Length, without Transfer-Encoding")
			return
		}
		if !r.ProtoAtLeast(1, 1) {
			// net/http drops an HTTP/1.0 request's Transfer-Encoding unseen
			// (RFC 9112 §6.1: such a message is faulty and the connection
			// must close after it), so none is kept alive.
			w.Header().Set("Connection", "close")
		}
		r.Body = http.MaxBytesReader(w, r.Body, l.MaxBodyBytes)
		h.ServeHTTP(w, r)
	})
}

// refuse answers code with a one-line reason and closes the connection:
// what follows on it is not read as a request.
func refuse(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Connection", "close")
	http.Error(w, reason, code)
}
