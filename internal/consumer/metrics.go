package consumer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Metrics are the consumer's metrics (docs/design.md, "Metrics"). Label values
// come from closed sets and are pre-initialized so dashboards show zeros.
// The connection gauge, mailsvc_amqp_connected{role="consumer"}, lives in
// the shared *broker.Metrics.
type Metrics struct {
	// Consumed counts acknowledged input events by event_type
	// (OrderConfirmed, OrderCancelled, other) and outcome.
	Consumed *prometheus.CounterVec
	// DeadLettered counts messages published to the dead-letter exchange,
	// by reason.
	DeadLettered *prometheus.CounterVec
	// Duration is the time from a delivery's arrival to its ack, in seconds.
	Duration prometheus.Histogram
	// Connections counts AMQP connections that started consuming: 1 after the
	// start, one more per reconnect.
	Connections prometheus.Counter
	// IngestRetries counts failed attempts to record a batch of events
	// (database unreachable or refusing), each held and retried.
	IngestRetries prometheus.Counter
	// Redelivered counts deliveries the broker flagged redelivered.
	Redelivered prometheus.Counter
	// Releases counts the times the deliveries held were given back to the
	// broker because the database refused writes.
	Releases prometheus.Counter
	// DeadLetterRefusals counts dead-letter publishes the broker refused
	// (basic.nack: the dead-letter queue is full), one per message and
	// attempt; each refused message is held unacknowledged and retried.
	DeadLetterRefusals prometheus.Counter
	// DeadLettersHeld is the number of poison messages held
	// unacknowledged now because the dead-letter queue refused them.
	DeadLettersHeld prometheus.Gauge
	// EventLag is the time from an event's occurred_at to the commit that
	// recorded it, in seconds, for every event that wrote something (not
	// duplicates, ignored or dead-lettered events).
	EventLag prometheus.Histogram
}

// LagBuckets are the buckets of the lag histograms, in seconds: from 10 ms
// (a healthy pipeline) to 6 h (an outage ridden out).
var LagBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600}

// NewMetrics registers the consumer metrics on reg. It panics if they are
// already registered there (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_events_consumed_total",
			Help: "Input events acknowledged, by event type and outcome.",
		}, []string{"event_type", "outcome"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_events_dead_lettered_total",
			Help: "Input messages the consumer published to the dead-letter exchange, by reason.",
		}, []string{"reason"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_consume_duration_seconds",
			Help:    "Time from a delivery's arrival to its acknowledgement.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		Connections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_consumer_sessions_total",
			Help: "AMQP sessions of the consumer that started consuming (one per start or reconnect).",
		}),
		IngestRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_ingest_retries_total",
			Help: "Failed attempts to record a batch of input events; the batch is held and retried.",
		}),
		Redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_events_redelivered_total",
			Help: "Input deliveries the broker flagged redelivered.",
		}),
		Releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_consumer_releases_total",
			Help: "Times the held deliveries were given back to the broker because the database refused writes.",
		}),
		DeadLetterRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_dead_letter_refusals_total",
			Help: "Dead-letter publishes the broker refused (the dead-letter queue is full), per message and attempt; the message is held and retried.",
		}),
		DeadLettersHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mailsvc_dead_letters_held",
			Help: "Poison messages held unacknowledged because the dead-letter queue refused them.",
		}),
		EventLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_event_lag_seconds",
			Help:    "Time from an input event's occurred_at to the commit that recorded it (events that wrote something).",
			Buckets: LagBuckets,
		}),
	}
	for _, t := range []string{string(mailtype.OrderConfirmed), string(mailtype.OrderCancelled), eventTypeOther} {
		for _, o := range mailtype.Dispositions {
			m.Consumed.WithLabelValues(t, string(o))
		}
	}
	for _, r := range mailtype.DeadLetterReasons {
		m.DeadLettered.WithLabelValues(string(r))
	}
	reg.MustRegister(m.Consumed, m.DeadLettered, m.Duration, m.Connections, m.IngestRetries, m.Redelivered, m.Releases,
		m.DeadLetterRefusals, m.DeadLettersHeld, m.EventLag)
	return m
}

// observe counts one acknowledged delivery.
func (m *Metrics) observe(eventType string, outcome mailtype.Disposition, reason mailtype.Reason, received time.Time) {
	m.Consumed.WithLabelValues(eventType, string(outcome)).Inc()
	if outcome == mailtype.DispositionDeadLettered {
		m.DeadLettered.WithLabelValues(string(reason)).Inc()
	}
	m.Duration.Observe(time.Since(received).Seconds())
}
