package broker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// connection.blocked and connection.unblocked set mailsvc_amqp_blocked of
// the connection's role, and a connection that closes while blocked is no
// longer counted blocked. The broker sends them on a resource alarm, which
// a test cannot raise on the shared broker, so the notifications are fed
// as amqp091-go delivers them.
func TestBlockedNotificationsSetTheGauge(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	gauge := func(role string) float64 {
		var d dto.Metric
		require.NoError(t, m.Blocked.WithLabelValues(role).Write(&d))
		return d.Gauge.GetValue()
	}
	in := make(chan amqp.Blocking)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchBlocked(in, m.OnBlocked(RoleRelay))
	}()
	// Each send returns once the one before it was handled (unbuffered).
	in <- amqp.Blocking{Active: true, Reason: "low on memory"}
	in <- amqp.Blocking{Active: true, Reason: "low on memory"}
	require.Equal(t, 1.0, gauge(RoleRelay))
	in <- amqp.Blocking{Active: false}
	in <- amqp.Blocking{Active: false}
	require.Equal(t, 0.0, gauge(RoleRelay))
	in <- amqp.Blocking{Active: true, Reason: "low on disk"}
	in <- amqp.Blocking{Active: true, Reason: "low on disk"}
	require.Equal(t, 1.0, gauge(RoleRelay))
	require.Equal(t, 0.0, gauge(RoleConsumer), "another role is not blocked")
	close(in) // the connection closed
	<-done
	require.Equal(t, 0.0, gauge(RoleRelay))
	require.Nil(t, (*Metrics)(nil).OnBlocked(RoleRelay), "no metrics, no callback")
}
