package relay

import (
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
)

// FromConfig maps the daemon's configuration onto the relay's: relay.*
// keys, amqp.events_exchange and amqp.declare_topology, the broker
// reconnect backoff, and retention.window for published rows. Fields
// without a config key keep their defaults.
func FromConfig(c *config.Config) Config {
	return Config{
		AMQP: broker.Config{
			URL: c.AMQP.URL.Reveal(), Name: "mailsvc-relay",
			Backoff: c.AMQP.ReconnectBackoff, BackoffMax: c.AMQP.ReconnectBackoffMax,
		},
		Exchange:        c.AMQP.EventsExchange,
		DeclareExchange: c.AMQP.DeclareTopology,
		EventsQueue:     c.AMQP.EventsQueue,
		BatchSize:       c.Relay.BatchSize,
		PollInterval:    c.Relay.PollInterval,
		ConfirmTimeout:  c.Relay.ConfirmTimeout,
		MaxAttempts:     c.Relay.MaxAttempts,
		DisableListen:   !c.Relay.Listen,
		Lease:           c.Relay.Lease,
		LeaseRenew:      c.Relay.LeaseRenew,
		LeaseRetry:      c.Relay.LeaseRetry,
		RetentionWindow: c.Retention.Window,
	}.WithDefaults()
}
