package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// The test binary runs as a relay process when childEnv is set (TestMain).
const (
	childEnv         = "MAILSVC_RELAY_TEST_CHILD"
	childDBEnv       = "MAILSVC_RELAY_TEST_DB"
	childExchangeEnv = "MAILSVC_RELAY_TEST_EXCHANGE"
	// childLeaseEnv, set to "default", runs the child with the production
	// lease periods (relay.lease, lease_renew, lease_retry defaults).
	childLeaseEnv = "MAILSVC_RELAY_TEST_LEASE"
)

// runChild runs one relay, logging JSON at debug level to stdout, until
// its stdin closes; the parent test reads the log.
func runChild() int {
	ctx := context.Background()
	exchange := os.Getenv(childExchangeEnv)
	st, err := store.Open(ctx, store.Options{URL: os.Getenv(childDBEnv), MaxConns: 2, EventsExchange: exchange})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := testConfig(brokertest.URL(), exchange)
	if os.Getenv(childLeaseEnv) == "default" {
		cfg.Lease, cfg.LeaseRenew, cfg.LeaseRetry = 0, 0, 0
	}
	r, err := relay.New(cfg, st, log, relay.NewMetrics(prometheus.NewRegistry()), nil)
	if err == nil {
		err = r.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is a relay process started by a test.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer
	scanned chan struct{}

	mu        sync.Mutex
	leader    bool
	standby   bool
	published int
}

func startChild(t *testing.T, b *bundle) *child {
	t.Helper()
	return startChildWith(t, b, b.sc.URL)
}

// startChildWith starts a relay process on dbURL; extraEnv is added to
// its environment.
func startChildWith(t *testing.T, b *bundle, dbURL string, extraEnv ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), scanned: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), childEnv+"=1", childDBEnv+"="+dbURL, childExchangeEnv+"="+b.names.EventsExchange)
	c.cmd.Env = append(c.cmd.Env, extraEnv...)
	c.cmd.Stderr = &c.stderr
	var err error
	c.stdin, err = c.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	go c.scan(stdout)
	t.Cleanup(func() { c.stop(t) })
	return c
}

// scan reads the child's JSON log lines.
func (c *child) scan(r io.Reader) {
	defer close(c.scanned)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			Published int    `json:"published"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		c.mu.Lock()
		switch line.Msg {
		case "relay lease acquired: this replica publishes the outbox":
			c.leader = true
		case "relay standing by: another replica holds the relay lease":
			c.standby = true
		case "outbox round":
			c.published += line.Published
		}
		c.mu.Unlock()
	}
}

func (c *child) state() (leader, standby bool, published int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader, c.standby, c.published
}

// kill ends the process at once (SIGKILL): no graceful release of anything.
func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	_ = c.cmd.Wait()
	<-c.scanned
}

// stop closes stdin (a graceful stop) and waits, killing after 15 s.
func (c *child) stop(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.stdin.Close()
	timer := time.AfterFunc(15*time.Second, func() { _ = c.cmd.Process.Kill() })
	defer timer.Stop()
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("relay process: %v\n%s", err, c.stderr.String())
	}
	<-c.scanned
}

func TestTwoProcessesOnlyOnePublishesAndTheOtherTakesOver(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	batch := func(from int) []store.Feedback {
		fs := make([]store.Feedback, 10)
		for i := range fs {
			fs[i] = feedback(fmt.Sprintf("o%d", from+i), mailtype.EmailSent)
		}
		return fs
	}

	first := startChild(t, b)
	require.Eventually(t, func() bool { l, _, _ := first.state(); return l }, 30*time.Second, 10*time.Millisecond)
	second := startChild(t, b)
	require.Eventually(t, func() bool { _, s, _ := second.state(); return s }, 30*time.Second, 10*time.Millisecond)

	b.insert(t, batch(0)...)
	require.Eventually(t, func() bool { _, _, p := first.state(); return p == 10 }, 20*time.Second, 10*time.Millisecond)
	require.Len(t, obs.WaitFor(t, 10), 10)
	leader, _, published := second.state()
	require.False(t, leader)
	require.Equal(t, 0, published, "the standby publishes nothing")

	first.kill(t)
	killed := time.Now()
	require.Eventually(t, func() bool { l, _, _ := second.state(); return l }, 10*time.Second, 10*time.Millisecond)
	t.Logf("standby took over %s after the leader was killed", time.Since(killed).Round(time.Millisecond))

	b.insert(t, batch(10)...)
	require.Eventually(t, func() bool { _, _, p := second.state(); return p == 10 }, 20*time.Second, 10*time.Millisecond)
	got := obs.WaitFor(t, 20)
	require.Len(t, got, 20)
	ids := map[string]bool{}
	for _, d := range got {
		ids[d.MessageID] = true
	}
	require.Len(t, ids, 20, "no duplicates: one relay at a time")
	require.Equal(t, 20, b.countPublished(t))
}

// TestVanishedLeaderHostIsReplacedWithin30s is the recipe of a leader whose
// host disappears without closing TCP, with the production lease periods:
// the leader's database link goes silent and swallows FIN (its PostgreSQL
// session stays open on the server), the leader is killed with SIGKILL,
// and a replica connected directly must take over and drain the outbox,
// every row exactly once, within 30 s.
func TestVanishedLeaderHostIsReplacedWithin30s(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	obs := observe(t, b.names, "#")
	link := testproxy.NewHole(t, testproxy.HostPort(t, b.sc.URL, "5432"))
	lease := childLeaseEnv + "=default"
	first := startChildWith(t, b, link.RewriteURL(t, b.sc.URL), lease)
	require.Eventually(t, func() bool { l, _, _ := first.state(); return l }, 30*time.Second, 10*time.Millisecond)
	second := startChildWith(t, b, b.sc.URL, lease)
	require.Eventually(t, func() bool { _, s, _ := second.state(); return s }, 30*time.Second, 10*time.Millisecond)
	b.insert(t, feedbackBatch("before", 10)...)
	require.Len(t, obs.WaitFor(t, 10), 10)
	require.Eventually(t, func() bool { return b.countPublished(t) == 10 }, 20*time.Second, 10*time.Millisecond)

	link.Blackhole()
	first.kill(t)
	vanished := time.Now()
	b.insert(t, feedbackBatch("after", 20)...)
	require.Eventually(t, func() bool { return b.countPublished(t) == 30 }, 40*time.Second, 20*time.Millisecond)
	took := time.Since(vanished)
	t.Logf("the outbox was drained by the standby %s after the leader's host vanished", took.Round(time.Millisecond))
	require.Less(t, took, 30*time.Second)
	// The standby logs its round after it marked the rows: wait for the line.
	require.Eventually(t, func() bool { _, _, p := second.state(); return p >= 20 }, 10*time.Second, 10*time.Millisecond)
	leader, _, published := second.state()
	require.True(t, leader)
	require.Equal(t, 20, published)
	requireEachOnce(t, b, obs, 30)
}

func feedbackBatch(prefix string, n int) []store.Feedback {
	fs := make([]store.Feedback, n)
	for i := range fs {
		fs[i] = feedback(fmt.Sprintf("%s-%d", prefix, i), mailtype.EmailSent)
	}
	return fs
}

// requireEachOnce checks that the events queue got every outbox row
// exactly once (n rows in all) and nothing else.
func requireEachOnce(t *testing.T, b *bundle, obs *brokertest.Observer, n int) {
	t.Helper()
	rows := b.outbox(t)
	require.Len(t, rows, n)
	got := obs.WaitFor(t, n)
	per := map[string]int{}
	for _, d := range got {
		per[d.MessageID]++
	}
	for _, row := range rows {
		require.NotNil(t, row.PublishedAt, row.EventID)
		require.Equal(t, 1, per[row.EventID], "deliveries of %s", row.EventID)
	}
	require.Len(t, got, n, "no other deliveries")
}
