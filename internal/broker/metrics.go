package broker

import "github.com/prometheus/client_golang/prometheus"

// Roles of an AMQP connection, the label values of mailsvc_amqp_connected
// and mailsvc_amqp_blocked.
const (
	RoleConsumer = "consumer"
	RoleRelay    = "relay"
)

// Roles lists every role label value.
var Roles = []string{RoleConsumer, RoleRelay}

// Metrics holds mailsvc_amqp_connected and mailsvc_amqp_blocked. Build it
// once per registry (the app shares it between the consumer and the
// relay).
type Metrics struct {
	// Connected is 1 while the connection of a role is open, else 0.
	Connected *prometheus.GaugeVec
	// Blocked is 1 while the broker blocks the connection of a role
	// (connection.blocked: a memory or disk alarm stops its publishes),
	// else 0.
	Blocked *prometheus.GaugeVec
}

// NewMetrics registers the broker metrics on reg, with the series of
// roles (RoleConsumer, RoleRelay: those the process runs) pre-initialized
// to 0, both when roles is empty. It panics if they are already registered
// on reg (a wiring bug).
func NewMetrics(reg prometheus.Registerer, roles ...string) *Metrics {
	m := &Metrics{
		Connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_amqp_connected",
			Help: "1 while the AMQP connection of the role is open, else 0.",
		}, []string{"role"}),
		Blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mailsvc_amqp_blocked",
			Help: "1 while the broker blocks the AMQP connection of the role (connection.blocked: a memory or disk alarm), else 0.",
		}, []string{"role"}),
	}
	if len(roles) == 0 {
		roles = []string{RoleConsumer, RoleRelay}
	}
	for _, r := range roles {
		m.Connected.WithLabelValues(r).Set(0)
		m.Blocked.WithLabelValues(r).Set(0)
	}
	reg.MustRegister(m.Connected, m.Blocked)
	return m
}

// OnState returns a Supervise onState callback that sets the gauge of role.
// A nil *Metrics gives a no-op callback.
func (m *Metrics) OnState(role string) func(bool) {
	if m == nil {
		return func(bool) {}
	}
	return setter(m.Connected.WithLabelValues(role))
}

// OnBlocked returns a Config.OnBlocked callback that sets the blocked gauge
// of role; nil for a nil *Metrics.
func (m *Metrics) OnBlocked(role string) func(bool) {
	if m == nil {
		return nil
	}
	return setter(m.Blocked.WithLabelValues(role))
}

func setter(g prometheus.Gauge) func(bool) {
	return func(on bool) {
		if on {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}
