package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// binPath is the mailsvc binary built once by TestMain.
var binPath string

// TestMain builds mailsvc and runs the tests; with MAILSVC_BENCH_RAW_CHILD
// set, it is instead the raw baseline's process of BenchmarkEndToEnd
// (runRawChild), which startBaseline starts.
func TestMain(m *testing.M) {
	if os.Getenv(rawChildEnv) != "" {
		os.Exit(runRawChild())
	}
	flag.Parse()
	if testing.Short() {
		// make unit: every test here runs mailsvc against the servers and
		// skips itself (testenv.NeedsServer); no binary to build.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mailsvc-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "mailsvc")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/mailsvc")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build mailsvc:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitListening waits until addr accepts TCP connections.
func waitListening(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, within, 50*time.Millisecond, "nothing listening on %s", addr)
}

// stack is one test's isolated world: a PostgreSQL schema, broker names,
// and the env that points mailsvc at them.
type stack struct {
	t      testing.TB
	schema *storetest.Schema
	names  *brokertest.Names
	env    map[string]string
}

func newStack(t testing.TB, smtpAddr string) *stack {
	t.Helper()
	sc := storetest.New(t)
	n := brokertest.New(t)
	host, port, err := net.SplitHostPort(smtpAddr)
	require.NoError(t, err)
	return &stack{t: t, schema: sc, names: n, env: map[string]string{
		"MAILSVC_DATABASE_URL":              sc.URL,
		"MAILSVC_AMQP_URL":                  brokertest.URL(),
		"MAILSVC_AMQP_INPUT_EXCHANGE":       n.InputExchange,
		"MAILSVC_AMQP_QUEUE":                n.Queue,
		"MAILSVC_AMQP_DEAD_LETTER_EXCHANGE": n.DeadLetterExchange,
		"MAILSVC_AMQP_DEAD_LETTER_QUEUE":    n.DeadLetterQueue,
		"MAILSVC_AMQP_EVENTS_EXCHANGE":      n.EventsExchange,
		"MAILSVC_SMTP_HOST":                 host,
		"MAILSVC_SMTP_PORT":                 port,
		"MAILSVC_SMTP_TLS":                  "none",
		"MAILSVC_MAIL_FROM":                 "Cửa hàng Demo <orders@shop.example>",
		"MAILSVC_SENDER_RETRY_BACKOFF":      "200ms",
		"MAILSVC_SENDER_RETRY_BACKOFF_MAX":  "2s",
		"MAILSVC_SENDER_POLL_INTERVAL":      "200ms",
		"MAILSVC_RELAY_POLL_INTERVAL":       "200ms",
		"MAILSVC_LOG_LEVEL":                 "info",
	}}
}

// environ returns os.Environ plus the stack's env plus extra.
func (s *stack) environ(extra map[string]string) []string {
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// cli runs one mailsvc command to completion and returns its stdout.
func (s *stack) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = s.environ(nil)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("mailsvc %v: %w: %s", args, err, errb.String())
	}
	return out.String(), nil
}

// proc is one running `mailsvc serve`.
type proc struct {
	cmd     *exec.Cmd
	httpURL string
	logs    *syncBuffer
	done    chan struct{}
}

// serve starts `mailsvc serve` and waits until /readyz answers 200 and the
// input queue exists (so no test event is published before it is bound).
func (s *stack) serve(extra map[string]string) *proc {
	s.t.Helper()
	port := freePort(s.t)
	env := map[string]string{"MAILSVC_HTTP_ADDR": "127.0.0.1:" + strconv.Itoa(port)}
	for k, v := range extra {
		env[k] = v
	}
	cmd := exec.Command(binPath, "serve")
	cmd.Env = s.environ(env)
	p := &proc{cmd: cmd, httpURL: fmt.Sprintf("http://127.0.0.1:%d", port), logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	require.NoError(s.t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.t.Cleanup(func() { p.kill() })
	require.Eventually(s.t, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		r, err := http.Get(p.httpURL + "/readyz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200 && queueExists(s.t, s.names.Queue)
	}, 30*time.Second, 50*time.Millisecond, "mailsvc serve never became ready")
	select {
	case <-p.done:
		s.t.Fatalf("mailsvc serve exited at start:\n%s", p.logs.String())
	default:
	}
	return p
}

// kill sends SIGKILL (a crash: no cleanup) and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to d for a graceful exit.
func (p *proc) stop(t testing.TB, d time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.kill()
		t.Errorf("mailsvc serve did not stop within %s after SIGTERM", d)
	}
}

// metrics returns the /metrics text.
func (p *proc) metrics(t testing.TB) string {
	t.Helper()
	r, err := http.Get(p.httpURL + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(r.Body)
	return b.String()
}

// queueExists reports whether a queue of that name is declared.
func queueExists(t testing.TB, name string) bool {
	conn := brokertest.DialRaw(t)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return err == nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// decodeJSON decodes an HTTP response body into v.
func decodeJSON(t testing.TB, r *http.Response, v any) {
	t.Helper()
	defer r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	require.NoError(t, json.NewDecoder(r.Body).Decode(v))
}
