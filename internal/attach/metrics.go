package attach

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the fetch stage's metrics (docs/design.md, "Metrics").
type Metrics struct {
	// Fetch is the time of one fetch, success or not, in seconds.
	Fetch prometheus.Histogram
	// Failures counts failed fetches by reason (Reasons, pre-initialised).
	Failures *prometheus.CounterVec
	// Stored counts the attachment bytes stored (once per file).
	Stored prometheus.Counter
	// Fetched counts files fetched, verified and stored.
	Fetched prometheus.Counter
	// MailsFailed counts mails failed for a required attachment.
	MailsFailed prometheus.Counter
}

// NewMetrics registers the metrics on reg; it panics when they are
// registered there already (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Fetch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_attachment_fetch_seconds",
			Help:    "Time of one attachment fetch, connection to verified bytes, success or not.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_attachment_fetch_failures_total",
			Help: "Attachment fetches that failed, by reason.",
		}, []string{"reason"}),
		Stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_attachment_bytes_stored_total",
			Help: "Bytes of attachments fetched, verified and stored in PostgreSQL.",
		}),
		Fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_attachments_fetched_total",
			Help: "Attachments fetched, verified and stored.",
		}),
		MailsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_attachment_mails_failed_total",
			Help: "Mails failed with reason attachment (a required file could not be had).",
		}),
	}
	for _, r := range Reasons {
		m.Failures.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.Fetch, m.Failures, m.Stored, m.Fetched, m.MailsFailed)
	}
	return m
}
