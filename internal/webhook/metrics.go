package webhook

import "github.com/prometheus/client_golang/prometheus"

// Result is the result label of mailsvc_webhooks_received_total: what
// became of one request (docs/design.md, "Metrics"). The set is closed.
type Result string

// The results of a webhook request, with the HTTP status each answers.
const (
	// ResultProcessed (200): verified, recorded, and it changed something:
	// a delivery marked, an address suppressed, a feedback event written.
	ResultProcessed Result = "processed"
	// ResultUnmatched (200): verified and recorded, an event mailsvc acts
	// on, but it names no mail mailsvc sent (another sender on the same
	// provider account, or a mail deleted by retention) and changed
	// nothing (a bounce whose recipients were suppressed already).
	ResultUnmatched Result = "unmatched"
	// ResultIgnored (200): verified and recorded, an event mailsvc does not
	// act on (email.sent, email.opened, a bounce that is not permanent, a
	// second report of a delivery).
	ResultIgnored Result = "ignored"
	// ResultDuplicate (200): its webhook id was recorded before (the
	// provider redelivered it): nothing changed.
	ResultDuplicate Result = "duplicate"
	// ResultBadSignature (401): the svix-id, svix-timestamp or
	// svix-signature header is missing or unreadable, or no signature
	// matches the secret.
	ResultBadSignature Result = "bad_signature"
	// ResultStaleTimestamp (401): svix-timestamp is more than Tolerance
	// away from now (a replay, or a clock far off).
	ResultStaleTimestamp Result = "stale_timestamp"
	// ResultMalformed (400): correctly signed, but the body is not the
	// JSON of a provider event (no type, no email id, a bad time).
	ResultMalformed Result = "malformed"
	// ResultTooLarge (413): the body exceeds Config.MaxBodyBytes.
	ResultTooLarge Result = "too_large"
	// ResultError (503): the database failed; nothing was recorded and the
	// provider redelivers later.
	ResultError Result = "error"
)

// Results lists every result, pre-initialised in the metric.
var Results = []Result{ResultProcessed, ResultUnmatched, ResultIgnored, ResultDuplicate,
	ResultBadSignature, ResultStaleTimestamp, ResultMalformed, ResultTooLarge, ResultError}

// Providers lists the provider label values (one webhook endpoint each).
var Providers = []string{ProviderResend}

// Metrics are the webhook endpoint's metrics. Safe for concurrent use.
type Metrics struct {
	// Received is mailsvc_webhooks_received_total{provider,result}.
	Received *prometheus.CounterVec
}

// NewMetrics creates the metrics, every label pair at 0, and registers
// them with reg (nil: not registered, for tests). It panics when they are
// registered twice, like prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Received: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailsvc_webhooks_received_total",
		Help: "Provider webhook requests by provider and result (processed, unmatched, ignored, duplicate, bad_signature, stale_timestamp, malformed, too_large, error).",
	}, []string{"provider", "result"})}
	for _, p := range Providers {
		for _, r := range Results {
			m.Received.WithLabelValues(p, string(r))
		}
	}
	if reg != nil {
		reg.MustRegister(m.Received)
	}
	return m
}
