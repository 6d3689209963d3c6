package app

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

var dedupeKeyHeader = regexp.MustCompile(`(?m)^X-Dedupe-Key: (\S+)\r?$`)

// deliveredKeys returns the dedupe key of every message srv took, in order.
func deliveredKeys(t *testing.T, srv *smtptest.Server) []string {
	t.Helper()
	var keys []string
	for _, m := range srv.Messages() {
		k := dedupeKeyHeader.FindSubmatch(m.Data)
		require.NotNil(t, k, "X-Dedupe-Key in %q", m.Data)
		keys = append(keys, string(k[1]))
	}
	return keys
}

// TestShutdownLetsInFlightSendsFinishWhileTheConsumerHangs runs Serve with
// an SMTP server that answers every DATA 1.5 s late, a backlog of mails
// for one worker, and a consumer whose batch is stuck in the database,
// then cancels its context while a send is in flight. The sender stops
// claiming at once and its claimed sends finish and are recorded within
// sender.shutdown_timeout although the consumer uses all of its own
// budget: every mail the server took is `sent` once with one EmailSent,
// and Serve returns nil within ShutdownBound. (With one stop deadline
// shared in sequence, the sender kept claiming while the consumer held
// the deadline, then had its send cut after DATA.)
func TestShutdownLetsInFlightSendsFinishWhileTheConsumerHangs(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	const backlog = 14
	for range backlog {
		srv.Inject(smtptest.Data, smtptest.Delay(1500*time.Millisecond))
	}
	waiting := sc.HoldInserts(t, "stuck")
	cfg := secretConfig(t, sc, testproxy.HostPort(t, sc.URL, "5432"), n, map[string]string{
		"MAILSVC_SMTP_HOST": srv.Host, "MAILSVC_SMTP_PORT": fmt.Sprint(srv.Port), "MAILSVC_SMTP_TLS": "none",
		"MAILSVC_SENDER_WORKERS": "1", "MAILSVC_SENDER_BATCH_SIZE": "1", "MAILSVC_SENDER_SHUTDOWN_TIMEOUT": "6s",
	})
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil))) }()

	require.Eventually(t, func() bool {
		_, consumers, err := queueState(t, n.Queue)
		return err == nil && consumers == 1
	}, 30*time.Second, 20*time.Millisecond, "consuming")
	events := make([]broker.Message, 0, backlog)
	for i := range backlog {
		events = append(events, confirmedEvent(n, fmt.Sprintf("0199a1f0-0000-7000-8000-%012d", 100+i), fmt.Sprint(100+i)))
	}
	publishRaw(t, events...)
	require.Eventually(t, func() bool { return sc.QueryInt(t, `SELECT count(*) FROM mail`) == backlog }, 30*time.Second, 20*time.Millisecond)
	publishRaw(t, confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000000ff", "stuck"))
	require.Eventually(t, func() bool { return waiting() == 1 }, 30*time.Second, 20*time.Millisecond, "the consumer's batch is stuck")
	require.Eventually(t, func() bool { return srv.Delaying() == 1 }, 30*time.Second, time.Millisecond, "a send is in flight")

	cancel()
	stopAt := time.Now()
	var err error
	select {
	case err = <-served:
	case <-time.After(ShutdownBound(cfg) + 10*time.Second):
		t.Fatal("Serve did not return")
	}
	took := time.Since(stopAt)
	require.NoError(t, err, "a clean stop")
	require.Less(t, took, ShutdownBound(cfg))
	t.Logf("Serve returned %s after cancel (bound %s)", took.Round(time.Millisecond), ShutdownBound(cfg))
	require.Contains(t, logs.String(), `"msg":"stop component","component":"consumer"`, "the consumer used up its own budget")

	keys := deliveredKeys(t, srv)
	t.Logf("delivered %d of %d", len(keys), backlog)
	require.NotEmpty(t, keys)
	require.Less(t, len(keys), backlog, "claims stopped at the cancel")
	seen := map[string]bool{}
	for _, k := range keys {
		require.False(t, seen[k], "%s delivered twice", k)
		seen[k] = true
		require.Equal(t, "sent", sc.QueryMap(t, `SELECT dedupe_key, status FROM mail WHERE dedupe_key = $1`, k)[k], k)
		require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent' AND dedupe_key = $1`, k), k)
	}
	require.EqualValues(t, len(keys), sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`), "sent means delivered")
	require.EqualValues(t, len(keys), sc.QueryInt(t, `SELECT count(*) FROM outbox`), "no other feedback")
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'stuck'`), "the stuck batch never committed")
	require.Eventually(t, func() bool { return queueDepth(t, n.Queue) == 1 }, 10*time.Second, 20*time.Millisecond, "and its delivery went back")
}

// queueDepth is the number of ready messages in queue.
func queueDepth(t *testing.T, queue string) int {
	t.Helper()
	messages, _, err := queueState(t, queue)
	require.NoError(t, err)
	return messages
}

// queueState returns queue's ready messages and consumers; an error when
// it does not exist.
func queueState(t *testing.T, queue string) (messages, consumers int, err error) {
	t.Helper()
	return brokertest.QueueState(t, queue)
}
