package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/httpguard"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// floodBound is the documented bound (docs/threat-model.md): a flood of
// slow and large requests on the webhook listener grows serve's peak
// RSS by at most twice the listener's MemoryBound (its live bytes, and
// the collector's headroom at GOGC=100), plus 16 MiB for the goroutines
// and the runtime's own structures.
var floodBound = 2*httpguard.Webhooks.MemoryBound() + 16<<20

// rss reads a process's resident set (VmRSS) or its peak (VmHWM), bytes.
func rss(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// 200 clients send a POST to the webhook path with 1 MiB of a header
// that never ends, and 100 more a Content-Length of 1 MiB followed by
// only 256 KiB of it (a body that never ends), all at once: serve's peak
// RSS, until the listener has answered or dropped every one of them,
// grows by less than floodBound, and the probes answer during the flood.
func TestWebhookFloodKeepsMemoryBounded(t *testing.T) {
	smtp := smtptest.New(t, smtptest.Options{})
	s := e2etest.NewStack(t, smtp.Addr)
	hook := fmt.Sprintf("127.0.0.1:%d", e2etest.FreePort(t))
	p := s.Serve(map[string]string{"MAILSVC_WEBHOOKS_ADDR": hook,
		"MAILSVC_WEBHOOKS_RESEND_SECRET": "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"})
	e2etest.WaitListening(t, hook, 10*time.Second)
	pid := p.Cmd.Process.Pid
	before := rss(t, pid, "VmHWM")

	pad := strings.Repeat("a", 1<<20)
	body := strings.Repeat("{", 256<<10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", hook, 5*time.Second)
			if err != nil {
				return // the backlog is full: the kernel refused it
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if i%3 != 0 {
				_, _ = io.WriteString(c, "POST /webhooks/resend HTTP/1.1\r\nHost: x\r\nX-Pad: "+pad)
				return
			}
			_, _ = io.WriteString(c, "POST /webhooks/resend HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"+body)
		}()
	}
	wg.Wait()

	// The probe port is another listener: it still answers.
	c, err := net.Dial("tcp", strings.TrimPrefix(p.HTTPURL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
	// Each flooding connection ends by the server's hand: answered (431 or
	// 413) or cut at its read timeout, once the cap lets it in.
	start := time.Now()
	ended := drain(conns, 60*time.Second)
	peak := rss(t, pid, "VmHWM")
	t.Logf("serve peak RSS %d MiB before the flood, %d MiB at its end (growth %d MiB, bound %d MiB); %d connections, %d ended by the server in %s",
		before>>20, peak>>20, (peak-before)>>20, floodBound>>20, len(conns), ended, time.Since(start).Round(time.Second))
	require.Equal(t, len(conns), ended, "connections the server never ended")
	require.Less(t, peak-before, floodBound)
}

// drain reads every connection until the server ends it, within d, and
// returns how many it ended (an EOF or a reset, not the deadline).
func drain(conns []net.Conn, d time.Duration) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := 0
	deadline := time.Now().Add(d)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				mu.Lock()
				ended++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ended
}
