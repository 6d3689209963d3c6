package app

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// partNames lists the components a daemon runs, in start order.
func (d *daemon) partNames() []string {
	var names []string
	for _, p := range d.parts {
		names = append(names, p.name)
	}
	return names
}

// families lists the metric names a /metrics body exports.
func families(body string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			out[strings.Fields(name)[0]] = true
		}
	}
	return out
}

// requireFamilies checks that body exports every metric of want and none
// of notWant.
func requireFamilies(t *testing.T, body string, want, notWant []string) {
	t.Helper()
	got := families(body)
	for _, m := range want {
		require.True(t, got[m], "exports %s", m)
	}
	for _, m := range notWant {
		require.False(t, got[m], "does not export %s", m)
	}
}

var (
	consumerMetrics = []string{"mailsvc_events_consumed_total", "mailsvc_consumer_sessions_total"}
	senderMetrics   = []string{"mailsvc_send_attempts_total", "mailsvc_fencing_rejections_total"}
	relayMetrics    = []string{"mailsvc_relay_leader", "mailsvc_relay_published_total"}
	statsMetrics    = []string{"mailsvc_mails", "mailsvc_stats_last_refresh_timestamp_seconds"}
)

func waitReady(t *testing.T, d *daemon) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := get(t, d.http.addr, "/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "ready")
}

// TestSplitRolesCompleteTheFlowTogether runs the three roles in three
// processes' worth of wiring on one database and broker: a sender-only
// process is ready with the broker unreachable and, while it works, takes
// nothing from the input queue; a consumer-only one records the events
// and sends nothing; a relay-only one publishes the feedback (and reads
// the queue gauges). The webhook listener (webhooks.addr is set here) runs
// whatever the roles. Together every mail is delivered once and every
// EmailSent published once.
func TestSplitRolesCompleteTheFlowTogether(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	dbAddr := testproxy.HostPort(t, sc.URL, "5432")
	env := func(roles string, extra map[string]string) map[string]string {
		m := map[string]string{"MAILSVC_SERVE_ROLES": roles, "MAILSVC_SMTP_HOST": srv.Host,
			"MAILSVC_SMTP_PORT": fmt.Sprint(srv.Port), "MAILSVC_SMTP_TLS": "none", "MAILSVC_SENDER_POLL_INTERVAL": "50ms"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// The input queue holds two events before any process runs.
	base := secretConfig(t, sc, dbAddr, n, nil)
	conn := brokertest.Dial(t)
	defer conn.Close()
	require.NoError(t, consumer.DeclareTopology(conn, ConsumerConfig(base)))
	publishRaw(t, confirmedEvent(n, "0199a1f0-0000-7000-8000-000000000001", "1"),
		confirmedEvent(n, "0199a1f0-0000-7000-8000-000000000002", "2"))

	// Sender only, with no broker at all: ready, sends, consumes nothing.
	snd := startDaemon(t, secretConfig(t, sc, dbAddr, n, env("sender", map[string]string{
		"MAILSVC_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/"})))
	require.Equal(t, []string{"http", "sender", "janitor", "stats"}, snd.partNames())
	waitReady(t, snd)
	_, body := get(t, snd.http.addr, "/metrics")
	requireFamilies(t, body, append(senderMetrics, statsMetrics...),
		append(append([]string{"mailsvc_amqp_connected"}, consumerMetrics...), relayMetrics...))
	_, err := storetest.InsertPending(t.Context(), sc.Store, storetest.Mail{OrderID: "direct"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'direct' AND status = 'sent'`) == 1
	}, 30*time.Second, 20*time.Millisecond, "the sender-only process sends")
	messages, consumers, err := queueState(t, n.Queue)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 0}, [2]int{messages, consumers}, "nobody consumes: the events wait in the queue")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail`))

	// Consumer only: records both events; the sender-only process sends them.
	cons := startDaemon(t, secretConfig(t, sc, dbAddr, n, env("consumer", nil)))
	require.Equal(t, []string{"http", "consumer", "webhooks", "stats"}, cons.partNames())
	waitReady(t, cons)
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == 3
	}, 30*time.Second, 20*time.Millisecond, "recorded by one process, sent by the other")
	_, body = get(t, cons.http.addr, "/metrics")
	requireFamilies(t, body, append(consumerMetrics, statsMetrics...), append(senderMetrics, relayMetrics...))
	require.Equal(t, "1", metricLine(body, `mailsvc_amqp_connected{role="consumer"}`))
	require.Empty(t, metricLine(body, `mailsvc_amqp_connected{role="relay"}`), "no relay connection here")
	require.Equal(t, 0, queueDepth(t, n.Queue))

	// Nothing published the feedback yet; a relay-only process does.
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent' AND published_at IS NULL`))
	obs := brokertest.Observe(t, n.EventsExchange, n.EventsExchange+".observer", "#")
	rel := startDaemon(t, secretConfig(t, sc, dbAddr, n, env("relay", nil)))
	require.Equal(t, []string{"http", "relay", "queuestats", "stats"}, rel.partNames())
	waitReady(t, rel)
	got := obs.WaitFor(t, 3)
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`) == 3
	}, 30*time.Second, 20*time.Millisecond)
	_, body = get(t, rel.http.addr, "/metrics")
	requireFamilies(t, body, append(relayMetrics, statsMetrics...), append(consumerMetrics, senderMetrics...))

	keys := deliveredKeys(t, srv)
	slices.Sort(keys)
	require.Equal(t, []string{"order-confirmed:1", "order-confirmed:2", "order-confirmed:direct"}, keys, "each mail delivered once")
	require.Len(t, got, 3, "each EmailSent published once")
}
