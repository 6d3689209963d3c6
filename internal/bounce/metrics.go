package bounce

import "github.com/prometheus/client_golang/prometheus"

// Refusals lists the reason label values of mailsvc_bounce_refused_total.
var Refusals = []string{"relay", "bad_token", "too_large", "session_limit", "not_asked", "error"}

// Verdicts lists the verdict label values of mailsvc_bounce_reports_total.
var Verdicts = []Verdict{Permanent, Transient, Undetermined, Delayed, Delivered}

// Metrics are the bounce listener's. Safe for concurrent use.
type Metrics struct {
	// Reports is mailsvc_bounce_reports_total{verdict,matched}.
	Reports *prometheus.CounterVec
	// Refused is mailsvc_bounce_refused_total{reason}.
	Refused *prometheus.CounterVec
}

// NewMetrics creates the metrics, every label value at 0, registered with
// reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_bounce_reports_total",
			Help: "Delivery status notifications recorded by the bounce listener, by verdict (permanent, transient, undetermined, delayed, delivered) and matched (true: its mail exists).",
		}, []string{"verdict", "matched"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_bounce_refused_total",
			Help: "Mail the bounce listener refused, by reason (relay: a recipient outside the bounce domain; bad_token: a forged or mangled VERP token; too_large; session_limit; not_asked: a success report mailsvc did not ask for; error: the database failed, the sender retries).",
		}, []string{"reason"}),
	}
	for _, v := range Verdicts {
		m.Reports.WithLabelValues(string(v), "true")
		m.Reports.WithLabelValues(string(v), "false")
	}
	for _, r := range Refusals {
		m.Refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Reports, m.Refused)
	}
	return m
}
