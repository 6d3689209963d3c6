package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
	"github.com/mailsvc/mailsvc/internal/tracing/tracingtest"
)

const (
	orderTrace  = "0af7651916cd43dd8448eb211c80319c"
	orderSpan   = "b7ad6b7169203331"
	orderParent = "00-" + orderTrace + "-" + orderSpan + "-01"
)

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

// feedbackByKey maps the dedupe_key of each feedback event to it.
func feedbackByKey(t *testing.T, msgs []broker.Delivery) map[string]broker.Delivery {
	t.Helper()
	out := map[string]broker.Delivery{}
	for _, m := range msgs {
		var env struct {
			DedupeKey string `json:"dedupe_key"`
		}
		require.NoError(t, json.Unmarshal(m.Body, &env))
		out[env.DedupeKey] = m
	}
	return out
}

// tracedConfig is the daemon's config for the tracing tests: SMTP to srv,
// tracing.enabled as given.
func tracedConfig(srv *smtptest.Server, enabled bool) map[string]string {
	return map[string]string{
		"MAILSVC_SMTP_HOST": srv.Host, "MAILSVC_SMTP_PORT": fmt.Sprint(srv.Port), "MAILSVC_SMTP_TLS": "none",
		"MAILSVC_TRACING_ENABLED": fmt.Sprint(enabled),
	}
}

// TestTracingFollowsAnOrderToItsFeedback runs Serve with tracing on and
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at an in-process OTLP/HTTP
// receiver. An OrderConfirmed published with a traceparent (and
// tracestate) comes back as an EmailSent whose traceparent is of the same
// trace; one published without starts a new trace, whose id is on its
// EmailSent. Each trace was exported as exactly three spans chained
// process → send → publish, the EmailSent's traceparent naming the publish
// span, and the trace context is stored on the mail and outbox rows.
// Not parallel: it sets OTEL_* variables.
func TestTracingFollowsAnOrderToItsFeedback(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	sc := storetest.New(t)
	n := brokertest.New(t)
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	events := brokertest.Observe(t, n.EventsExchange, n.EventsQueue, "#")
	cfg := secretConfig(t, sc, testproxy.HostPort(t, sc.URL, "5432"), n, tracedConfig(srv, true))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, cfg, slog.New(slog.NewJSONHandler(&syncBuffer{}, nil))) }()
	require.Eventually(t, func() bool {
		_, consumers, err := queueState(t, n.Queue)
		return err == nil && consumers == 1
	}, 30*time.Second, 20*time.Millisecond, "consuming")

	traced := confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000007a1", "701")
	traced.Headers = map[string]any{"traceparent": orderParent, "tracestate": "shop=order-svc"}
	publishRaw(t, traced, confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000007a2", "702"))
	got := feedbackByKey(t, events.WaitFor(t, 2))
	require.Len(t, got, 2)
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop")
	}
	require.Len(t, events.Messages(), 2, "one EmailSent per order, nothing else")

	for key, want := range map[string]string{"order-confirmed:701": orderTrace, "order-confirmed:702": ""} {
		ev := got[key]
		require.Equal(t, "EmailSent", ev.Type, key)
		m := traceparentRE.FindStringSubmatch(broker.HeaderCarrier(ev.Headers).Get("traceparent"))
		require.NotNil(t, m, "%s: traceparent header %v", key, ev.Headers)
		traceID, publishSpan := m[1], m[2]
		if want != "" {
			require.Equal(t, want, traceID, "%s: the order's trace comes back on its EmailSent", key)
			require.Equal(t, "shop=order-svc", broker.HeaderCarrier(ev.Headers).Get("tracestate"), key)
		} else {
			require.NotEqual(t, orderTrace, traceID, "%s: a new trace", key)
			require.NotContains(t, ev.Headers, "tracestate", key)
		}
		require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND trace_context LIKE '%'||$2||'%'`, key, traceID), key)
		require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dedupe_key = $1 AND trace_context LIKE '%'||$2||'%'`, key, traceID), key)

		spans := rcv.WaitTrace(t, traceID, 3)
		require.Len(t, spans, 3, "%s: process, send, publish", key)
		byName := map[string]tracingtest.Span{}
		for _, s := range spans {
			byName[s.Name] = s
		}
		process, send, publish := byName["process "+n.Queue], byName["send smtp"], byName["publish "+n.EventsExchange]
		require.Equal(t, []string{"SPAN_KIND_CONSUMER", "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER"},
			[]string{process.Kind, send.Kind, publish.Kind}, "%s: %+v", key, spans)
		if want != "" {
			require.Equal(t, orderSpan, process.ParentSpanID, "%s: process is the child of the order's span", key)
		} else {
			require.Empty(t, process.ParentSpanID, "%s: process is the root", key)
		}
		require.Equal(t, process.SpanID, send.ParentSpanID, "%s: send is the child of process", key)
		require.Equal(t, send.SpanID, publish.ParentSpanID, "%s: publish is the child of send", key)
		require.Equal(t, publishSpan, publish.SpanID, "%s: the EmailSent's traceparent names the publish span", key)
		require.Equal(t, "inserted", process.Attributes["mailsvc.outcome"], key)
		require.Equal(t, key, send.Attributes["mailsvc.dedupe_key"])
		require.Equal(t, "sent", send.Attributes["mailsvc.status"], key)
		require.Equal(t, "EmailSent", publish.Attributes["mailsvc.event_type"], key)
		require.Equal(t, "mailsvc", process.Resource["service.name"])
		for _, s := range spans {
			require.Empty(t, s.Error, "%s: %s", key, s.Name)
		}
	}
	require.Len(t, rcv.Spans(), 6, "no other span")
}

// Off (the default), nothing is traced: the order's traceparent is not
// stored, and its EmailSent carries no traceparent.
func TestTracingOffCarriesNoTraceContext(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	n := brokertest.New(t)
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	events := brokertest.Observe(t, n.EventsExchange, n.EventsQueue, "#")
	px := testproxy.New(t, testproxy.HostPort(t, sc.URL, "5432"))
	d := startDaemon(t, secretConfig(t, sc, px.Addr, n, tracedConfig(srv, false)))
	require.Eventually(t, func() bool { c, _ := get(t, d.http.addr, "/readyz"); return c == http.StatusOK },
		30*time.Second, 50*time.Millisecond)
	ev := confirmedEvent(n, "0199a1f0-0000-7000-8000-0000000007a3", "703")
	ev.Headers = map[string]any{"traceparent": orderParent}
	publishRaw(t, ev)
	got := events.WaitFor(t, 1)
	require.Len(t, got, 1)
	require.Equal(t, "EmailSent", got[0].Type)
	require.NotContains(t, got[0].Headers, "traceparent")
	require.Zero(t, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE trace_context IS NOT NULL`))
	require.Zero(t, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE trace_context IS NOT NULL`))
}

// Without the relay role, a part of its own ("tracing", last stop stage)
// flushes the spans: a sender-only process's send span, held by the batch
// processor (OTEL_BSP_SCHEDULE_DELAY of a minute), is exported by the
// staged stop itself, before serve would shut the provider down. Not
// parallel: it sets OTEL_* variables.
func TestASenderOnlyProcessFlushesItsSpansInTheLastStopStage(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
	sc := storetest.New(t)
	n := brokertest.New(t)
	srv := smtptest.New(t, smtptest.Options{Username: "mailer", Password: smtpSecret})
	extra := tracedConfig(srv, true)
	extra["MAILSVC_SERVE_ROLES"], extra["MAILSVC_SENDER_POLL_INTERVAL"] = "sender", "50ms"
	d := startDaemon(t, secretConfig(t, sc, testproxy.HostPort(t, sc.URL, "5432"), n, extra))
	require.Equal(t, []string{"http", "sender", "janitor", "stats", "tracing"}, d.partNames())
	_, err := storetest.InsertPending(t.Context(), sc.Store, storetest.Mail{OrderID: "801"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '801' AND status = 'sent'`) == 1
	}, 30*time.Second, 20*time.Millisecond, "sent")
	require.Empty(t, rcv.Spans(), "held by the batch processor")

	stopAll(slog.New(slog.NewJSONHandler(&syncBuffer{}, nil)), d.parts)
	spans := rcv.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "send smtp", spans[0].Name)
	require.Equal(t, "order-confirmed:801", spans[0].Attributes["mailsvc.dedupe_key"])
}
