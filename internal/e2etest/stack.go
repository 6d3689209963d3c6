// Package e2etest starts mailsvc as its users do, for the end-to-end tests
// (e2e/) and the benchmark lab (bench/): a real `mailsvc serve` process on
// a schema and broker names of its own, an order service's publisher with
// confirms, and a consumer of the feedback events that checks each against
// the published contract.
package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Binary is the mailsvc binary Build made.
var Binary string

// Build builds cmd/mailsvc once into a temporary directory and sets
// Binary; the returned function removes it. A TestMain calls it before
// m.Run.
func Build() (cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "mailsvc-e2e-")
	if err != nil {
		return nil, err
	}
	Binary = filepath.Join(dir, "mailsvc")
	// Built in the main module's directory (this file's ../..), with its
	// go.mod and go.sum, whichever module's test calls Build.
	_, self, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", Binary, "./cmd/mailsvc")
	build.Dir = filepath.Join(filepath.Dir(self), "..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, errors.Join(fmt.Errorf("build mailsvc: %w", err), os.RemoveAll(dir))
	}
	return func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "remove the built binary:", err)
		}
	}, nil
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitListening waits until addr accepts TCP connections.
func WaitListening(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, within, 50*time.Millisecond, "nothing listening on %s", addr)
}

// Stack is one test's isolated world: a PostgreSQL schema, broker names,
// and the env that points mailsvc at them.
type Stack struct {
	T      testing.TB
	Schema *storetest.Schema
	Names  *brokertest.Names
	// Env is what serve and CLI add to the environment.
	Env map[string]string
}

// NewStack makes a schema and broker names for t and the environment that
// points mailsvc at them and at the SMTP server at smtpAddr.
func NewStack(t testing.TB, smtpAddr string) *Stack {
	t.Helper()
	sc := storetest.New(t)
	n := brokertest.New(t)
	host, port, err := net.SplitHostPort(smtpAddr)
	require.NoError(t, err)
	return &Stack{T: t, Schema: sc, Names: n, Env: map[string]string{
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

// Environ returns os.Environ plus the Stack's env plus extra.
func (s *Stack) Environ(extra map[string]string) []string {
	env := os.Environ()
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// CLI runs one mailsvc command to completion and returns its stdout.
func (s *Stack) CLI(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary, args...)
	cmd.Env = s.Environ(nil)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("mailsvc %v: %w: %s", args, err, errb.String())
	}
	return out.String(), nil
}

// Proc is one running `mailsvc serve`.
type Proc struct {
	Cmd     *exec.Cmd
	HTTPURL string
	Logs    *SyncBuffer
	// Done is closed once the process exited.
	Done chan struct{}
}

// Serve starts `mailsvc serve` and waits until /readyz answers 200 and the
// input queue exists (so no test event is published before it is bound).
func (s *Stack) Serve(extra map[string]string) *Proc {
	s.T.Helper()
	port := FreePort(s.T)
	env := map[string]string{"MAILSVC_HTTP_ADDR": "127.0.0.1:" + strconv.Itoa(port)}
	for k, v := range extra {
		env[k] = v
	}
	cmd := exec.Command(Binary, "serve")
	cmd.Env = s.Environ(env)
	p := &Proc{Cmd: cmd, HTTPURL: fmt.Sprintf("http://127.0.0.1:%d", port), Logs: &SyncBuffer{}, Done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Logs, p.Logs
	require.NoError(s.T, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.Done) }()
	s.T.Cleanup(func() { p.Kill() })
	require.Eventually(s.T, func() bool {
		select {
		case <-p.Done:
			return true
		default:
		}
		r, err := http.Get(p.HTTPURL + "/readyz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200 && QueueExists(s.T, s.Names.Queue)
	}, 30*time.Second, 50*time.Millisecond, "mailsvc serve never became ready")
	select {
	case <-p.Done:
		s.T.Fatalf("mailsvc serve exited at start:\n%s", p.Logs.String())
	default:
	}
	return p
}

// Kill sends SIGKILL (a crash: no cleanup) and waits for the exit.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Done
}

// Stop sends SIGTERM and waits up to d for a graceful exit.
func (p *Proc) Stop(t testing.TB, d time.Duration) {
	t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(d):
		p.Kill()
		t.Errorf("mailsvc serve did not stop within %s after SIGTERM", d)
	}
}

// Metrics returns the /metrics text.
func (p *Proc) Metrics(t testing.TB) string {
	t.Helper()
	r, err := http.Get(p.HTTPURL + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(r.Body)
	return b.String()
}

// QueueExists reports whether a queue of that name is declared.
func QueueExists(t testing.TB, name string) bool {
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

// SyncBuffer is a bytes.Buffer safe for concurrent use (a process's
// output, written by its pipes and read by the test).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
