package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// get fetches path from the server and returns the status and body.
func get(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// startHTTP starts an httpServer on a free loopback port and stops it at
// cleanup.
func startHTTP(t *testing.T, g prometheus.Gatherer, checks *[]ReadyCheck, log *slog.Logger) *httpServer {
	t.Helper()
	return startHTTPWith(t, config.HTTP{}, g, checks, log)
}

// startHTTPWith is startHTTP with cfg (its Addr replaced by a free
// loopback port).
func startHTTPWith(t *testing.T, cfg config.HTTP, g prometheus.Gatherer, checks *[]ReadyCheck, log *slog.Logger) *httpServer {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	h := newHTTPServer(cfg, g, checks, log)
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, h.Stop(ctx))
		require.NoError(t, h.Err(), "the server did not fail")
		http.DefaultClient.CloseIdleConnections()
	})
	return h
}

func TestHealthzAnswersWithoutDependencies(t *testing.T) {
	t.Parallel()
	failing := []ReadyCheck{{Name: "database", Check: func(context.Context) error { return store.ErrSchemaBehind }}}
	h := startHTTP(t, prometheus.NewRegistry(), &failing, slog.New(slog.DiscardHandler))
	code, body := get(t, h.addr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
	code, body = get(t, h.addr, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	var r map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Equal(t, "not ready", r["status"])
	require.Equal(t, "database", r["check"])
	require.Contains(t, r["reason"], "mailsvc migrate")
}

// TestPprofOnlyWhenConfigured: with http.pprof the server answers Go's
// profile endpoints (the command line of this process, a heap profile, a
// CPU profile of one second); without it (the default) they do not exist.
// Not parallel, like the other profile test: Go runs one CPU profile at a
// time in a process.
func TestPprofOnlyWhenConfigured(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	off := startHTTP(t, prometheus.NewRegistry(), &[]ReadyCheck{}, discard)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		code, _ := get(t, off.addr, path)
		require.Equal(t, http.StatusNotFound, code, "%s without http.pprof", path)
	}
	on := startHTTPWith(t, config.HTTP{Pprof: true}, prometheus.NewRegistry(), &[]ReadyCheck{}, discard)
	code, body := get(t, on.addr, "/debug/pprof/cmdline")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "app.test", "the command line of this test binary")
	code, body = get(t, on.addr, "/debug/pprof/heap?debug=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "heap profile:")
	code, body = get(t, on.addr, "/debug/pprof/profile?seconds=1")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzipped pprof profile, got %d bytes", len(body))
	code, _ = get(t, on.addr, "/metrics")
	require.Equal(t, http.StatusOK, code, "the other endpoints stay")
}

// TestProfileInFlightDoesNotHoldUpTheStop: a stop ends a 60 s CPU profile
// at once (it gets what was sampled so far) instead of waiting for it
// until the stop's budget, 3 s here, runs out; symbolization answers a
// POST, as go tool pprof sends it.
func TestProfileInFlightDoesNotHoldUpTheStop(t *testing.T) {
	h := newHTTPServer(config.HTTP{Addr: "127.0.0.1:0", Pprof: true}, prometheus.NewRegistry(), &[]ReadyCheck{}, slog.New(slog.DiscardHandler))
	require.NoError(t, h.Start(context.Background()))
	res, err := http.Post("http://"+h.addr+"/debug/pprof/symbol", "text/plain", strings.NewReader("0x1"))
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode, "POST /debug/pprof/symbol")
	type answer struct {
		code int
		body string
	}
	long := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.addr+"/debug/pprof/profile?seconds=60", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			long <- answer{body: err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		long <- answer{res.StatusCode, string(b)}
	}()
	// The profile is running once the server's goroutines show its handler.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, dump := get(t, h.addr, "/debug/pprof/goroutine?debug=1")
		assert.Contains(c, dump, "net/http/pprof.Profile", "the profile's handler runs")
	}, 20*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, h.Stop(ctx), "the stop waited for the profile")
	got := <-long
	require.Equal(t, http.StatusOK, got.code, "the profile so far: %s", got.body)
	require.True(t, strings.HasPrefix(got.body, "\x1f\x8b"), "a gzipped pprof profile")
}

func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: px.RewriteURL(t, sc.URL), MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	checks := []ReadyCheck{{Name: "database", Check: st.Ping}, {Name: "schema", Check: st.CheckSchema}}
	h := startHTTP(t, prometheus.NewRegistry(), &checks, slog.New(slog.DiscardHandler))

	code, body := get(t, h.addr, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"status":"ready"}`, body)

	px.Cut()
	code, body = get(t, h.addr, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, `"check":"database"`)

	px.Restore(t)
	require.Eventually(t, func() bool {
		code, _ := get(t, h.addr, "/readyz")
		return code == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond)

	// A schema behind the binary is not ready either.
	behind := storetest.NewEmpty(t)
	behindChecks := []ReadyCheck{{Name: "database", Check: behind.Store.Ping}, {Name: "schema", Check: behind.Store.CheckSchema}}
	h2 := startHTTP(t, prometheus.NewRegistry(), &behindChecks, slog.New(slog.DiscardHandler))
	code, body = get(t, h2.addr, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.Contains(body, `"check":"schema"`), body)
}

// TestReadyzTurnsNotReadyWhileWritesAreRefused revokes the daemon's
// INSERT privilege on mail (its own role: the database still answers
// Ping) while events arrive: /readyz turns 503 naming the database within
// 30 s, the consumer gives the deliveries back and takes none, nothing is
// dead-lettered; once the privilege is back, every event has exactly one
// row and was acked, and /readyz is 200 again, without a restart.
func TestReadyzTurnsNotReadyWhileWritesAreRefused(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	role, roleURL := sc.NewRole(t)
	u, err := url.Parse(roleURL)
	require.NoError(t, err)
	u.User = url.UserPassword(role, dbSecret) // the server trusts loopback; secretConfig wants the secret
	d := startDaemon(t, secretConfig(t, sc, u.Host, n, map[string]string{"MAILSVC_DATABASE_URL": u.String()}))
	ready := func() (int, string) { return get(t, d.http.addr, "/readyz") }
	require.Eventually(t, func() bool { c, _ := ready(); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	sc.Exec(t, "REVOKE INSERT ON mail FROM "+role)
	const events = 10
	msgs := make([]broker.Message, events)
	for i := range msgs {
		msgs[i] = confirmedEvent(n, fmt.Sprintf("0199a1f0-0000-7000-8000-%012d", 500+i), fmt.Sprint(500+i))
	}
	refusedAt := time.Now()
	publishRaw(t, msgs...)
	var body string
	require.Eventually(t, func() bool {
		var c int
		c, body = ready()
		return c == http.StatusServiceUnavailable
	}, 30*time.Second, 50*time.Millisecond)
	t.Logf("/readyz not ready %s after the refusal", time.Since(refusedAt).Round(time.Millisecond))
	require.Contains(t, body, `"check":"database"`)
	require.Contains(t, body, "permission denied")
	require.Eventually(t, func() bool { return queueDepth(t, n.Queue) == events }, 30*time.Second, 50*time.Millisecond,
		"the consumer gave every delivery back")
	require.Equal(t, 0, queueDepth(t, n.DeadLetterQueue), "nothing dead-lettered")
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM mail`))

	sc.Exec(t, "GRANT INSERT ON mail TO "+role)
	consumed := `mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="inserted"}`
	require.Eventually(t, func() bool {
		_, metrics := get(t, d.http.addr, "/metrics")
		return metricLine(metrics, consumed) == fmt.Sprint(events) && queueDepth(t, n.Queue) == 0
	}, 30*time.Second, 50*time.Millisecond, "every event recorded and acked")
	require.EqualValues(t, events, sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.EqualValues(t, events, sc.QueryInt(t, `SELECT count(DISTINCT event_id) FROM mail`), "one row per event")
	require.Equal(t, 0, queueDepth(t, n.DeadLetterQueue))
	require.Eventually(t, func() bool { c, _ := ready(); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
}
