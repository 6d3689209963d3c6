package httpguard_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/httpguard"
)

// short are limits small enough to reach in a test.
var short = httpguard.Limits{MaxConns: 2, MaxHeaderBytes: 1 << 10, MaxBodyBytes: 64,
	ReadHeaderTimeout: time.Second, ReadTimeout: 300 * time.Millisecond, WriteTimeout: time.Second,
	IdleTimeout: 200 * time.Millisecond}

// served starts a guarded server with l and returns its address and the
// number of requests its handler saw, and the bodies' read errors.
func served(t *testing.T, l httpguard.Limits) (string, *atomic.Int64, chan error) {
	t.Helper()
	ln, err := httpguard.Listen("127.0.0.1:0", l)
	require.NoError(t, err)
	var calls atomic.Int64
	bodyErrs := make(chan error, 16)
	srv := httpguard.Server(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, err := io.ReadAll(r.Body)
		bodyErrs <- err
		if err != nil {
			http.Error(w, "body", http.StatusRequestEntityTooLarge)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}), nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), &calls, bodyErrs
}

// exchange writes raw on a new connection and reads every response until
// the server closes it (or 5 s pass, a failure); it returns their status
// codes.
func exchange(t *testing.T, addr, raw string) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	// Read while writing: a server that answers before it read everything
	// (431) resets the connection half a second after its answer, which
	// then must already have been read.
	type result struct {
		codes []int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		br := bufio.NewReader(c)
		var r result
		for {
			code, err := readStatus(br)
			if code != 0 {
				r.codes = append(r.codes, code) // its body may end in the reset
			}
			if err != nil {
				r.err = err
				done <- r
				return
			}
		}
	}()
	_, _ = io.WriteString(c, raw) // a server that answered early may refuse the rest
	r := <-done
	require.True(t, errors.Is(r.err, io.EOF) || errors.Is(r.err, io.ErrUnexpectedEOF) || errors.Is(r.err, syscall.ECONNRESET),
		"the server did not end the connection: %v", r.err)
	return r.codes
}

// readStatus reads one response from br, body included, and returns its
// status code (0 when none was read) and the error that ended the read.
func readStatus(br *bufio.Reader) (int, error) {
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	_, err = io.ReadAll(r.Body)
	return r.StatusCode, err
}

const next = "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"

// RFC 9112 §6.3: Content-Length with Transfer-Encoding is an error, and
// the connection is closed: the request smuggled behind it is not served.
func TestContentLengthWithTransferEncodingIsRefusedAndClosed(t *testing.T) {
	t.Parallel()
	addr, calls, _ := served(t, short)
	rs := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"0\r\n\r\n"+next)
	require.Len(t, rs, 1)
	require.Equal(t, http.StatusLengthRequired, rs[0])
	require.Equal(t, int64(0), calls.Load())
}

// net/http ignores an HTTP/1.0 request's Transfer-Encoding: the
// connection is closed after it, so nothing pipelined behind it is
// served, keep-alive asked or not.
func TestHTTP10IsNeverKeptAlive(t *testing.T) {
	t.Parallel()
	addr, calls, _ := served(t, short)
	rs := exchange(t, addr, "POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n"+
		"Connection: keep-alive\r\n\r\n0\r\n\r\n"+next)
	require.Equal(t, []int{http.StatusOK}, rs)
	require.Equal(t, int64(1), calls.Load())
}

func TestChunkedBodyIsRefusedAndClosed(t *testing.T) {
	t.Parallel()
	addr, calls, _ := served(t, short)
	rs := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"+next)
	require.Len(t, rs, 1)
	require.Equal(t, http.StatusLengthRequired, rs[0])
	require.Equal(t, int64(0), calls.Load())
}

// A request with Content-Length is served, and so is the next one on the
// connection (keep-alive works), until the idle timeout closes it.
func TestKeepAliveServesThenIdleCloses(t *testing.T) {
	t.Parallel()
	addr, calls, _ := served(t, short)
	start := time.Now()
	rs := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"+next)
	require.Len(t, rs, 2)
	require.Equal(t, http.StatusOK, rs[0])
	require.Equal(t, http.StatusOK, rs[1])
	require.Equal(t, int64(2), calls.Load())
	// exchange returned because the server closed the idle connection,
	// not because its 5 s read deadline passed.
	require.Less(t, time.Since(start), 4*time.Second)
}

func TestHeaderOverTheLimitIs431(t *testing.T) {
	t.Parallel()
	addr, calls, _ := served(t, short)
	rs := exchange(t, addr, "GET /a HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", 8<<10)+"\r\n\r\n")
	require.Len(t, rs, 1)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, rs[0])
	require.Equal(t, int64(0), calls.Load())
}

func TestBodyOverTheLimitFailsTheReadAndCloses(t *testing.T) {
	t.Parallel()
	addr, calls, bodyErrs := served(t, short)
	rs := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("b", 100)+next)
	require.Len(t, rs, 1)
	require.Equal(t, http.StatusRequestEntityTooLarge, rs[0])
	require.Equal(t, int64(1), calls.Load())
	var tooLarge *http.MaxBytesError
	require.ErrorAs(t, <-bodyErrs, &tooLarge)
}

// A body trickled slower than the read timeout is cut off: the handler's
// read fails and the connection ends.
func TestTrickledBodyIsCutOffAtTheReadTimeout(t *testing.T) {
	t.Parallel()
	addr, calls, bodyErrs := served(t, short)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nx")
	require.NoError(t, err)
	require.Error(t, <-bodyErrs)
	require.Equal(t, int64(1), calls.Load())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, _ = io.ReadAll(c) // the 413, then EOF
	var ne net.Error
	_, err = c.Read(make([]byte, 1))
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server kept the connection: %v", err)
}

// With MaxConns connections open, a further one is not served until one
// of them closes.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	l := short
	l.ReadHeaderTimeout = time.Minute
	l.ReadTimeout = time.Minute
	addr, calls, _ := served(t, l)
	var held []net.Conn
	for range l.MaxConns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET /slow HTTP/1.1\r\n") // a header never finished
		require.NoError(t, err)
		held = append(held, c)
	}
	third, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	require.NoError(t, err)
	defer third.Close()
	_, err = io.WriteString(third, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, third.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = third.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "served beyond the cap")
	require.Equal(t, int64(0), calls.Load())

	require.NoError(t, held[0].Close())
	require.NoError(t, third.SetReadDeadline(time.Now().Add(5*time.Second)))
	code, err := readStatus(bufio.NewReader(third))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(1), calls.Load())
}

func TestMemoryBound(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(2*(1<<10+12<<10+64)), short.MemoryBound())
	require.Equal(t, int64(128*(16<<10+12<<10+256<<10)), httpguard.Webhooks.MemoryBound())
}
