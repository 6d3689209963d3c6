package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/stats"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// publishRaw publishes messages with confirms to the test broker.
func publishRaw(t *testing.T, msgs ...broker.Message) {
	t.Helper()
	conn := brokertest.Dial(t)
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range pub.PublishBatch(ctx, msgs) {
		require.NoError(t, err, i)
	}
}

// confirmedEvent returns an OrderConfirmed message for order id.
func confirmedEvent(n *brokertest.Names, eventID, orderID string) broker.Message {
	body := fmt.Sprintf(`{"event_id":%q,"event_type":"OrderConfirmed","version":1,"occurred_at":%q,
		"dedupe_key":"order-confirmed:%s","data":{"order_id":%q,"email":"b@example.com","customer_name":"Nguyễn Văn B",
		"locale":"vi","currency":"VND","total":"1250000","items":[{"sku":"SKU-1","name":"Áo thun","quantity":2,"unit_price":"625000"}]}}`,
		eventID, time.Now().UTC().Format(time.RFC3339), orderID, orderID)
	return broker.Message{Exchange: n.InputExchange, RoutingKey: "order.confirmed", MessageID: eventID, Type: "OrderConfirmed",
		ContentType: "application/json", Body: []byte(body), Persistent: true, Mandatory: true}
}

// metricLine returns the value text of the sample line that starts with
// prefix in a /metrics body, or "".
func metricLine(body, prefix string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix+" ") {
			return strings.TrimPrefix(l, prefix+" ")
		}
	}
	return ""
}

// TestMetricsFollowARealFlow scrapes /metrics of the real wiring while
// events flow through the consumer: one event delivered 3 times is 1
// inserted and 2 duplicates, a poison message is 1 dead-lettered, and the
// database gauges show the one pending mail.
func TestMetricsFollowARealFlow(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	d := startDaemon(t, secretConfig(t, sc, px.Addr, n, nil))
	require.Eventually(t, func() bool {
		code, _ := get(t, d.http.addr, "/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "ready once the consumer's channel is open")

	ev := confirmedEvent(n, "0199a1f0-0000-7000-8000-000000000042", "42")
	publishRaw(t, ev, ev, ev)
	publishRaw(t, broker.Message{Exchange: n.InputExchange, RoutingKey: "order.confirmed", MessageID: "x",
		ContentType: "application/json", Body: []byte(`not json`), Persistent: true})

	consumed := `mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome=`
	var body string
	require.Eventually(t, func() bool {
		_, body = get(t, d.http.addr, "/metrics")
		return metricLine(body, consumed+`"inserted"}`) == "1" && metricLine(body, consumed+`"duplicate"}`) == "2" &&
			metricLine(body, `mailsvc_events_dead_lettered_total{reason="malformed_json"}`) == "1"
	}, 30*time.Second, 50*time.Millisecond, "counters follow the flow")
	require.Equal(t, "1", metricLine(body, `mailsvc_amqp_connected{role="consumer"}`))
	require.Contains(t, body, "mailsvc_consume_duration_seconds_count")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail`))

	d.part(t, "stats").(*stats.Collector).Refresh(context.Background())
	_, body = get(t, d.http.addr, "/metrics")
	pending := metricLine(body, `mailsvc_mails{status="pending"}`)
	sending := metricLine(body, `mailsvc_mails{status="sending"}`)
	require.Contains(t, []string{"1 0", "0 1"}, pending+" "+sending, "the one mail is pending or being sent")
	for _, s := range []string{"sent", "failed", "cancelled", "unknown"} {
		require.Equal(t, "0", metricLine(body, `mailsvc_mails{status="`+s+`"}`), s)
	}

	// Poison messages carry no secret in their dead-letter headers.
	conn := brokertest.Dial(t)
	defer conn.Close()
	g, err := broker.NewGetter(conn)
	require.NoError(t, err)
	defer g.Close()
	got, ok, err := g.Get(n.DeadLetterQueue)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "malformed_json", deadletter.Reason(got.Headers))
	requireNoSecret(t, "dead-letter headers", fmt.Sprint(got.Headers))
	requireNoSecret(t, "logs", d.logs.String())
}

// TestReadyzFollowsTheBroker cuts the consumer's broker connection through
// a proxy: /readyz goes 503 naming the broker, and 200 again once the
// consumer has reconnected by itself.
func TestReadyzFollowsTheBroker(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	dbpx := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	mqpx := testproxy.New(t, testproxy.HostPort(t, brokertest.URL(), "5672"))
	d := startDaemon(t, secretConfig(t, sc, dbpx.Addr, n, map[string]string{
		"MAILSVC_AMQP_URL": mqpx.RewriteURL(t, brokertest.URL()), "MAILSVC_AMQP_RECONNECT_BACKOFF": "50ms",
		"MAILSVC_AMQP_RECONNECT_BACKOFF_MAX": "200ms",
	}))
	ready := func() (int, string) { return get(t, d.http.addr, "/readyz") }
	require.Eventually(t, func() bool { c, _ := ready(); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	mqpx.Cut()
	var body string
	require.Eventually(t, func() bool {
		var c int
		c, body = ready()
		return c == http.StatusServiceUnavailable
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, body, `"check":"broker"`)

	mqpx.Restore(t)
	require.Eventually(t, func() bool { c, _ := ready(); return c == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
}
