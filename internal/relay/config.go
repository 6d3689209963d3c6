package relay

import "time"

// Settings is the `relay` section of configs/mailsvc.yaml, as the
// configuration file spells it: the mapstructure and yaml names are the
// keys (relay.batch_size, ...). internal/config decodes the section into
// it; DefaultSettings holds its defaults, Check its rules and Config maps
// it onto the relay's Config.
type Settings struct {
	// BatchSize is the most rows one publish round takes.
	BatchSize int `mapstructure:"batch_size" yaml:"batch_size"`
	// PollInterval is how often the active relay looks for due rows when
	// no wake-up arrived.
	PollInterval time.Duration `mapstructure:"poll_interval" yaml:"poll_interval"`
	// ConfirmTimeout bounds the wait for one round's publisher confirms.
	ConfirmTimeout time.Duration `mapstructure:"confirm_timeout" yaml:"confirm_timeout"`
	// MaxAttempts is the publish attempts before a row is marked dead.
	MaxAttempts int `mapstructure:"max_attempts" yaml:"max_attempts"`
	// Listen turns on LISTEN/NOTIFY wake-ups (lower latency than polling);
	// behind transaction pooling they never arrive, so turn it off there.
	Listen bool `mapstructure:"listen" yaml:"listen"`
	// Lease is how long the relay lease lasts after each renewal, on the
	// database's clock: the longest the outbox waits for a vanished leader.
	Lease time.Duration `mapstructure:"lease" yaml:"lease"`
	// LeaseRenew is how often the leader renews the lease; at most Lease/3.
	LeaseRenew time.Duration `mapstructure:"lease_renew" yaml:"lease_renew"`
	// LeaseRetry is how often a standby replica tries to take the lease.
	LeaseRetry time.Duration `mapstructure:"lease_retry" yaml:"lease_retry"`
	// UnroutableWindow is how long an outbox row whose publish comes back
	// unroutable (no queue bound for it on the events exchange) is retried
	// before relay.max_attempts can make it dead.
	UnroutableWindow time.Duration `mapstructure:"unroutable_window" yaml:"unroutable_window"`
}

// DefaultSettings returns the default of every relay.* key: the one place
// they are written. Config.WithDefaults takes its defaults from it too.
func DefaultSettings() Settings {
	return Settings{
		BatchSize:        100,
		PollInterval:     time.Second,
		ConfirmTimeout:   10 * time.Second,
		MaxAttempts:      10,
		Listen:           true,
		Lease:            15 * time.Second,
		LeaseRenew:       5 * time.Second,
		LeaseRetry:       2 * time.Second,
		UnroutableWindow: 24 * time.Hour,
	}
}

// Report receives one violation of a configuration rule: the full key
// it is about and the message (a format and its arguments).
type Report func(key, format string, args ...any)

// Check reports every rule of the relay.* keys that s breaks, in a fixed
// order, each under its full key.
func (s Settings) Check(bad Report) {
	for _, n := range []struct {
		key string
		n   int
	}{{"relay.batch_size", s.BatchSize}, {"relay.max_attempts", s.MaxAttempts}} {
		if n.n <= 0 {
			bad(n.key, "must be positive, got %d", n.n)
		}
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"relay.poll_interval", s.PollInterval}, {"relay.confirm_timeout", s.ConfirmTimeout},
		{"relay.lease", s.Lease}, {"relay.lease_renew", s.LeaseRenew}, {"relay.lease_retry", s.LeaseRetry},
		{"relay.unroutable_window", s.UnroutableWindow},
	} {
		if d.d <= 0 {
			bad(d.key, "must be a positive duration, got %s", d.d)
		}
	}
	if s.LeaseRenew > 0 && s.Lease < 3*s.LeaseRenew {
		bad("relay.lease_renew", "(%s) must be at most a third of relay.lease (%s): the leader needs two renewal periods of slack before the lease can expire", s.LeaseRenew, s.Lease)
	}
}

// Config maps the relay.* keys onto the relay's Config; the fields other
// sections set (AMQP, Exchange, RetentionWindow, ...) stay for the caller.
func (s Settings) Config() Config {
	return Config{
		BatchSize: s.BatchSize, PollInterval: s.PollInterval, ConfirmTimeout: s.ConfirmTimeout,
		MaxAttempts: s.MaxAttempts, DisableListen: !s.Listen,
		Lease: s.Lease, LeaseRenew: s.LeaseRenew, LeaseRetry: s.LeaseRetry, UnroutableWindow: s.UnroutableWindow,
	}
}
