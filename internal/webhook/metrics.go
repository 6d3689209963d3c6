package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/store"
)

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

// Reports lists the report label values of mailsvc_provider_reports_total:
// what a provider said about a mail, bounces by type. Everything else
// (email.sent, email.opened, contact.*, ...) is "other".
var Reports = []string{"delivered", "delivery_delayed", "bounced_permanent", "bounced_transient",
	"bounced_undetermined", "complained", "failed", "suppressed", "other"}

// Metrics are the webhook endpoint's metrics. Safe for concurrent use.
type Metrics struct {
	// Received is mailsvc_webhooks_received_total{provider,result}.
	Received *prometheus.CounterVec
	// Reports is mailsvc_provider_reports_total{provider,report,matched}:
	// each verified webhook recorded for the first time, by what it
	// reports and whether it named a mail of this deployment.
	Reports *prometheus.CounterVec
}

// NewMetrics creates the metrics, every label pair at 0, and registers
// them with reg (nil: not registered, for tests). It panics when they are
// registered twice, like prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Received: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailsvc_webhooks_received_total",
		Help: "Provider webhook requests by provider and result (processed, unmatched, ignored, duplicate, bad_signature, stale_timestamp, malformed, too_large, error).",
	}, []string{"provider", "result"}),
		Reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_reports_total",
			Help: "Provider reports about mails (verified webhooks, each once), by provider, report (delivered, delivery_delayed, bounced_permanent, bounced_transient, bounced_undetermined, complained, failed, suppressed, other) and matched (true: it named a mail of this deployment; always false for reports of kind other, which are not looked up).",
		}, []string{"provider", "report", "matched"})}
	for _, p := range Providers {
		for _, r := range Results {
			m.Received.WithLabelValues(p, string(r))
		}
		for _, r := range Reports {
			m.Reports.WithLabelValues(p, r, "true")
			m.Reports.WithLabelValues(p, r, "false")
		}
	}
	if reg != nil {
		reg.MustRegister(m.Received, m.Reports)
	}
	return m
}

// reportOf is the report label of w.
func reportOf(w store.Webhook) string {
	switch w.Effect {
	case store.EffectDelivered:
		return "delivered"
	case store.EffectDelayed:
		return "delivery_delayed"
	case store.EffectBounced:
		return "bounced_" + w.BounceType
	case store.EffectComplained:
		return "complained"
	case store.EffectFailed:
		return "failed"
	case store.EffectSuppressed:
		return "suppressed"
	}
	return "other"
}
