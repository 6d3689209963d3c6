package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// FailureReasons is the closed set of reason labels of
// mailsvc_relay_publish_failures_total: a broker nack, an unroutable return
// (mandatory flag, no queue bound), no confirm before relay.confirm_timeout,
// and the channel or connection closing under a pending confirm (broker).
var FailureReasons = []mailtype.Reason{mailtype.ReasonNack, mailtype.ReasonUnroutable, mailtype.ReasonTimeout, mailtype.ReasonBroker}

// Metrics are the relay's metrics (docs/design.md, "Metrics"). The outbox gauges
// (pending, oldest age, dead) come from the periodic stats query, not from
// here; mailsvc_amqp_connected{role="relay"} comes from the shared
// *broker.Metrics.
type Metrics struct {
	// Published counts rows the broker acked, by event_type.
	Published *prometheus.CounterVec
	// Failures counts failed publishes of one row, by reason (FailureReasons).
	Failures *prometheus.CounterVec
	// Leader is 1 on the replica that holds the relay lease and publishes,
	// else 0; it drops to 0 as soon as the leader decides to step down.
	Leader prometheus.Gauge
	// PublishLag is the time from an outbox row's created_at (the
	// database's clock, when the state change it reports committed) to
	// the broker's confirm of its publish, in seconds.
	PublishLag prometheus.Histogram
}

// NewMetrics registers the relay metrics on reg with every label value
// pre-initialized to 0. It panics if they are already registered on reg (a
// wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_relay_published_total",
			Help: "Outbox rows published to the events exchange and acked by the broker.",
		}, []string{"event_type"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_relay_publish_failures_total",
			Help: "Failed publishes of one outbox row (nack, unroutable, timeout, broker).",
		}, []string{"reason"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mailsvc_relay_leader",
			Help: "1 on the replica holding the relay lease (the active relay), else 0.",
		}),
		PublishLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_outbox_publish_lag_seconds",
			Help:    "Time from an outbox row's creation to the broker's confirm of its publish.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
		}),
	}
	for _, t := range mailtype.OutputEventTypes {
		m.Published.WithLabelValues(string(t))
	}
	for _, r := range FailureReasons {
		m.Failures.WithLabelValues(string(r))
	}
	reg.MustRegister(m.Published, m.Failures, m.Leader, m.PublishLag)
	return m
}
