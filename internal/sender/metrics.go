package sender

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Outcome labels of mailsvc_send_attempts_total (docs/design.md, "Metrics").
const (
	OutcomeSent      = "sent"
	OutcomeTransient = "transient"
	OutcomePermanent = "permanent"
	OutcomeAmbiguous = "ambiguous"
	// OutcomeFenced counts attempts whose outcome could not be written
	// because the row had changed owner.
	OutcomeFenced = "fenced"
)

// Providers lists the provider label values, pre-initialised so that
// dashboards show zeros, not gaps.
var Providers = []string{"smtp", "resend"}

var outcomes = []string{OutcomeSent, OutcomeTransient, OutcomePermanent, OutcomeAmbiguous, OutcomeFenced}

// Metrics are the sender's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	// Attempts is mailsvc_send_attempts_total{provider,outcome}.
	Attempts *prometheus.CounterVec
	// Duration is mailsvc_send_duration_seconds{provider}: one provider
	// call, in seconds.
	Duration *prometheus.HistogramVec
	// LeaseReclaims is mailsvc_lease_reclaims_total: rows claimed again
	// after their lease expired.
	LeaseReclaims prometheus.Counter
	// FencingRejections is mailsvc_fencing_rejections_total: writes refused
	// because the worker had lost its lease.
	FencingRejections prometheus.Counter
	// Ambiguous is mailsvc_ambiguous_outcomes_total{provider,next}: sends
	// whose outcome is unknown (no reply after DATA, a lost HTTP response, a
	// lease that expired mid-send, a reused idempotency key), by what
	// follows: NextRetry (sent again) or NextUnknown (ends unknown).
	Ambiguous *prometheus.CounterVec
	// DeliveryLag is mailsvc_delivery_lag_seconds: from the event's
	// occurred_at (the row's creation when it has none, as for a
	// cancellation notice) to the provider's acceptance of the mail, in
	// seconds, once per accepted send.
	DeliveryLag prometheus.Histogram
	// ClaimDuration is mailsvc_claim_duration_seconds: one claim statement
	// (store.ClaimMails), found rows or not, failed or not, in seconds.
	ClaimDuration prometheus.Histogram
	// Claimed is mailsvc_claimed_total{lane}: rows the claims took, by
	// priority lane (mailtype.Lanes), reclaimed leases included.
	Claimed *prometheus.CounterVec
	// HandedOver is mailsvc_handed_over_total{lane}: rows this process's
	// consumer leased to the pool as it wrote them, handed over in memory
	// with no claim (Handover), by priority lane.
	HandedOver *prometheus.CounterVec
	// Paused is mailsvc_provider_paused{provider,reason}: 1 while this
	// replica sees the provider paused for reason (mailtype.PauseReasons),
	// else 0. Every replica reads the same shared state: take max.
	Paused *prometheus.GaugeVec
	// Throttled is mailsvc_provider_throttled_total{provider}: sends the
	// provider refused for its rate limit or quota (HTTP 429); not attempts.
	Throttled *prometheus.CounterVec
	// SessionsRefused is mailsvc_provider_sessions_refused_total{provider}:
	// new sessions the provider refused before any mail was sent
	// (sender.TroubleBusy: an SMTP 4xx reply to the greeting), and of
	// them at_cap="true" the ones refused while another session of the
	// pool was live (its cap of connections per client; the mail went back
	// unspent).
	SessionsRefused *prometheus.CounterVec
	// StaleSlots is mailsvc_provider_stale_slots_total{provider}: send
	// slots of the rate limit given up because the send-started mark
	// committed too long after them (a slow database); the send waited for
	// a new slot, so that it did not burst.
	StaleSlots *prometheus.CounterVec
	// ConfigFailures is mailsvc_provider_config_failures_total{provider}:
	// sends that failed on the configuration or the provider's reachability
	// (what opens the breaker).
	ConfigFailures *prometheus.CounterVec
	// OutageFailures is mailsvc_provider_outage_failures_total{provider}:
	// sends the provider did not answer about the mail (TroubleOutage: no
	// response, a timeout, an HTTP 5xx, a relay that closed the session);
	// with ConfigFailures they open the breaker.
	OutageFailures *prometheus.CounterVec
	// Unspent is mailsvc_sends_unspent_total{provider,trouble}: sends that
	// met the provider's own failure (trouble outage or config) or an
	// earlier request still in progress (in_progress) and went back to
	// pending without spending an attempt (OutcomeUnanswered).
	Unspent *prometheus.CounterVec
	// Failovers is mailsvc_failovers_total{from,to}: sends the fallback
	// provider took after the primary failed without taking the mail.
	Failovers *prometheus.CounterVec
	// Slow is mailsvc_provider_slow{provider}: 1 while the latency guard
	// of this replica counts the provider slow (the p90 of its recent sends
	// over sender.slow_send_threshold), else 0.
	Slow *prometheus.GaugeVec
	// SendP90 is mailsvc_provider_send_p90_seconds{provider}: the p90 of
	// the provider's recent sends the guard judges by, in seconds; 0 until
	// it has enough of them.
	SendP90 *prometheus.GaugeVec
	// SlowReroutes is mailsvc_slow_reroutes_total{from,to}: mails the
	// latency guard sent through the fallback because the primary was
	// slow.
	SlowReroutes *prometheus.CounterVec
}

// Labels of mailsvc_ambiguous_outcomes_total's next.
const (
	NextRetry   = "retry"
	NextUnknown = "unknown"
)

// countAmbiguous counts an ambiguous outcome by the status it led to.
func (m *Metrics) countAmbiguous(provider string, o store.Outcome, status mailtype.Status) {
	if !o.Ambiguous {
		return
	}
	next := NextRetry
	if status != mailtype.StatusPending {
		next = NextUnknown
	}
	m.Ambiguous.WithLabelValues(provider, next).Inc()
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests). It panics if they are registered twice, like
// prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_send_attempts_total",
			Help: "Send attempts by provider and outcome (sent, transient, permanent, ambiguous, fenced).",
		}, []string{"provider", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mailsvc_send_duration_seconds",
			Help:    "Duration of one provider call, in seconds.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"provider"}),
		LeaseReclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_lease_reclaims_total",
			Help: "Mails claimed again after their lease expired.",
		}),
		FencingRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailsvc_fencing_rejections_total",
			Help: "Writes refused because the worker had lost the row's lease.",
		}),
		Ambiguous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_ambiguous_outcomes_total",
			Help: "Sends whose outcome is unknown (the mail may have been delivered), by provider and what follows (retry, unknown).",
		}, []string{"provider", "next"}),
		DeliveryLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_delivery_lag_seconds",
			Help:    "Time from an event's occurred_at to the provider's acceptance of its mail.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400},
		}),
		ClaimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailsvc_claim_duration_seconds",
			Help:    "Duration of one claim statement of the sender pool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		Claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_claimed_total",
			Help: "Rows the sender's claims took, by priority lane (priority, bulk).",
		}, []string{"lane"}),
		HandedOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_handed_over_total",
			Help: "Rows the consumer leased to the sender as it wrote them, handed over in memory with no claim, by priority lane.",
		}, []string{"lane"}),
		Paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_provider_paused",
			Help: "1 while the provider is paused for every replica, by reason (rate_limited, quota, breaker).",
		}, []string{"provider", "reason"}),
		Throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_throttled_total",
			Help: "Sends the provider refused for its rate limit or sending quota (HTTP 429); the mail waits, no attempt spent.",
		}, []string{"provider"}),
		SessionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_sessions_refused_total",
			Help: "New sessions the provider refused before any mail was sent (SMTP 4xx at the greeting); at_cap=true while another session was live: sender.workers is above its limit of connections per client, the mail waits, no attempt spent.",
		}, []string{"provider", "at_cap"}),
		StaleSlots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_stale_slots_total",
			Help: "Rate-limit send slots given up because the send-started mark committed too late after them (a slow database); the send waited for a new slot instead of bursting.",
		}, []string{"provider"}),
		ConfigFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_config_failures_total",
			Help: "Sends that failed on the provider's configuration or reachability (authentication, TLS, connection refused).",
		}, []string{"provider"}),
		OutageFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_provider_outage_failures_total",
			Help: "Sends the provider did not answer about the mail (no response, a timeout, HTTP 5xx, a closed session): with the configuration failures they open the breaker.",
		}, []string{"provider"}),
		Unspent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_sends_unspent_total",
			Help: "Sends that met the provider's own failure (trouble outage, config) or an earlier request still in progress (in_progress) and went back to pending, no attempt spent.",
		}, []string{"provider", "trouble"}),
		Failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_failovers_total",
			Help: "Mails the fallback provider took after the primary failed without taking them.",
		}, []string{"from", "to"}),
		Slow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_provider_slow",
			Help: "1 while the latency guard counts the provider slow (the p90 of its recent sends over sender.slow_send_threshold): it takes at most sender.slow_send_concurrency sends at once.",
		}, []string{"provider"}),
		SendP90: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_provider_send_p90_seconds",
			Help: "The p90 of the provider's recent sends (sender.slow_send_window of them), in seconds, as the latency guard judges it; 0 until it has enough.",
		}, []string{"provider"}),
		SlowReroutes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailsvc_slow_reroutes_total",
			Help: "Mails the latency guard sent through the fallback provider because the primary was slow (never one with an ambiguous outcome).",
		}, []string{"from", "to"}),
	}
	for _, p := range Providers {
		m.Slow.WithLabelValues(p)
		m.SendP90.WithLabelValues(p)
		m.Throttled.WithLabelValues(p)
		m.StaleSlots.WithLabelValues(p)
		m.SessionsRefused.WithLabelValues(p, "true")
		m.SessionsRefused.WithLabelValues(p, "false")
		m.ConfigFailures.WithLabelValues(p)
		m.OutageFailures.WithLabelValues(p)
		for _, t := range []Trouble{TroubleOutage, TroubleConfig, TroubleInProgress} {
			m.Unspent.WithLabelValues(p, string(t))
		}
		for _, r := range mailtype.PauseReasons {
			m.Paused.WithLabelValues(p, string(r))
		}
		for _, to := range Providers {
			if to != p {
				m.Failovers.WithLabelValues(p, to)
				m.SlowReroutes.WithLabelValues(p, to)
			}
		}
		m.Duration.WithLabelValues(p)
		for _, o := range outcomes {
			m.Attempts.WithLabelValues(p, o)
		}
		m.Ambiguous.WithLabelValues(p, NextRetry)
		m.Ambiguous.WithLabelValues(p, NextUnknown)
	}
	for _, l := range mailtype.Lanes {
		m.Claimed.WithLabelValues(l.String())
		m.HandedOver.WithLabelValues(l.String())
	}
	if reg != nil {
		reg.MustRegister(m.Attempts, m.Duration, m.LeaseReclaims, m.FencingRejections, m.Ambiguous, m.DeliveryLag, m.ClaimDuration,
			m.Paused, m.Throttled, m.SessionsRefused, m.StaleSlots, m.ConfigFailures, m.OutageFailures, m.Unspent, m.Failovers,
			m.Slow, m.SendP90, m.SlowReroutes, m.Claimed, m.HandedOver)
	}
	return m
}
