package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
)

// ConsoleConfig is the console's part of cfg (console.*), parsed: the
// credentials' hashes decoded, the proxy's addresses as networks.
func ConsoleConfig(cfg *config.Config) (console.Config, error) {
	k := cfg.Console
	out := console.Config{Addr: k.Addr, SessionTTL: k.SessionTTL, Proxy: console.TrustedProxy{
		Header: k.TrustedProxyHeader, RoleHeader: k.TrustedProxyRoleHeader, OperatorGroups: k.TrustedProxyOperatorGroups,
		DefaultRole: console.Role(k.TrustedProxyDefaultRole)}}
	if s := k.SessionSecret.Reveal(); s != "" {
		out.SessionSecret = []byte(s)
	}
	for _, u := range k.Users {
		out.Users = append(out.Users, console.Credential{Name: u.Name, Role: console.Role(u.Role), Hash: []byte(u.PasswordHash)})
	}
	for i, t := range k.Tokens {
		h, err := hex.DecodeString(t.TokenSHA256)
		if err != nil || len(h) != sha256.Size {
			return out, fmt.Errorf("console.tokens[%d].token_sha256: must be 64 hex characters", i)
		}
		out.Tokens = append(out.Tokens, console.Credential{Name: t.Name, Role: console.Role(t.Role), Hash: h})
	}
	for _, a := range k.TrustedProxyAddresses {
		n, err := config.ParseCIDR(a)
		if err != nil {
			return out, fmt.Errorf("console.trusted_proxy_addresses: %w", err)
		}
		out.Proxy.Addresses = append(out.Proxy.Addresses, n)
	}
	return out, nil
}

// buildConsole builds the console's server when console.addr is set
// (none otherwise): its own listener, whatever the roles, reading the
// store and acting through operator.Actions as the CLI does.
func (w *wiring) buildConsole() ([]named, error) {
	if w.cfg.Console.Addr == "" {
		return nil, nil
	}
	cc, err := ConsoleConfig(w.cfg)
	if err != nil {
		return nil, err
	}
	if cc.SessionSecret == nil {
		w.log.Warn("console.session_secret is not set: a random one is used, so session cookies are accepted by this process only (they end at a restart and other replicas refuse them)")
	}
	acts := &operator.Actions{Store: w.store, FromDomain: mailtype.AddressDomain(w.cfg.Mail.From),
		Namespace: w.namespace, ReplayDLQ: consoleReplayDLQ(w.cfg, consoleReplayLimit), Notices: w.templates.ResendNotice}
	providers := []string{w.cfg.Sender.Provider}
	if f := w.cfg.Sender.FallbackProvider; f != "" {
		providers = append(providers, f)
	}
	c, err := console.New(cc, console.Deps{Store: w.store, Actions: acts, DLQDepth: consoleDLQDepth(w.cfg),
		Providers: providers, Log: w.log.With("component", "console")})
	if err != nil {
		return nil, err
	}
	if host, _, _ := net.SplitHostPort(cc.Addr); host == "" || host == "0.0.0.0" || host == "::" {
		w.log.Info("the console listens on every interface: put it behind TLS (a reverse proxy) before people use it", "addr", cc.Addr)
	}
	if u := w.cfg.Console.PublicURL; u != "" {
		w.log.Info("console", "public_url", u, "addr", cc.Addr)
	}
	// It stops with the intake, in the first stage: no action is taken while
	// the daemon winds down.
	return []named{{name: "console", c: console.NewServer(c, cc.Addr)}}, nil
}

// consoleBrokerTimeout bounds each broker call of the console.
const consoleBrokerTimeout = 5 * time.Second

// consoleDLQDepth reads the dead-letter queue's depth as queuestats does
// (the management API when configured, else a passive declare), at most
// once per 10 s; ok false when the broker does not answer.
func consoleDLQDepth(cfg *config.Config) func(ctx context.Context) (int, bool) {
	qc := queueStatsConfig(cfg)
	var mu sync.Mutex
	var at time.Time
	var depth int
	var known bool
	return func(ctx context.Context) (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 10*time.Second {
			return depth, known
		}
		st, err := inspectDLQ(ctx, qc.AMQP, qc.Management, qc.DeadLetter)
		at, depth, known = time.Now(), st.Ready, err == nil
		return depth, known
	}
}

func inspectDLQ(ctx context.Context, bc broker.Config, m *broker.Management, queue string) (broker.QueueState, error) {
	ctx, cancel := context.WithTimeout(ctx, consoleBrokerTimeout)
	defer cancel()
	if m != nil {
		return m.InspectQueue(ctx, queue)
	}
	bc.DialTimeout = consoleBrokerTimeout
	conn, err := broker.Dial(bc)
	if err != nil {
		return broker.QueueState{}, err
	}
	defer conn.Close()
	return conn.InspectQueue(queue)
}

// consoleReplayRate is the console's replay rate, in messages a second
// (as `mailsvc dlq replay`'s default); consoleReplayLimit the most one
// console action replays: 10 s of it, well within the console's 20 s
// request cap. A larger queue takes several actions, or the CLI.
const (
	consoleReplayRate  = 20
	consoleReplayLimit = consoleReplayRate * 10
)

// consoleReplayDLQ replays the dead-letter queue as `mailsvc dlq replay`
// does, at most limit messages of those present at the start, and
// returns its summary (with the count, also beside an error); dryRun
// only counts what it would replay.
func consoleReplayDLQ(cfg *config.Config, limit int) func(ctx context.Context, dryRun bool) (string, error) {
	return func(ctx context.Context, dryRun bool) (string, error) {
		bc := BrokerConfig(cfg, "mailsvc-console-dlq-replay")
		bc.DialTimeout = consoleBrokerTimeout
		conn, err := broker.Dial(bc)
		if err != nil {
			return "", &deadletter.BrokerError{Err: err}
		}
		defer conn.Close()
		r, err := deadletter.NewReplayer(conn, deadletter.ReplayOptions{Queue: cfg.AMQP.DeadLetterQueue,
			Exchange: cfg.AMQP.InputExchange, Rate: consoleReplayRate, Limit: limit, DryRun: dryRun,
			ConfirmTimeout: consoleBrokerTimeout})
		if err != nil {
			return "", err
		}
		defer r.Close()
		err = r.Run(ctx)
		return replaySummary(r.Result(), cfg.AMQP.InputExchange, cfg.AMQP.DeadLetterQueue, limit, dryRun), err
	}
}

// replaySummary says what a console replay did (or would do) of a queue:
// "replayed K of M", and how to go on when M is more than one action
// replays.
func replaySummary(res deadletter.Result, exchange, queue string, limit int, dryRun bool) string {
	verb := "replayed"
	if dryRun {
		verb = "would replay"
	}
	s := fmt.Sprintf("%s %d of %d dead-lettered messages to %s", verb, res.Replayed, res.Depth, exchange)
	if res.Skipped > 0 {
		s += fmt.Sprintf("; %d skipped (no original routing key; left in %s)", res.Skipped, queue)
	}
	if res.Depth > limit {
		s += fmt.Sprintf("; the console replays at most %d at a time: run it again, or use `mailsvc dlq replay` for a large queue", limit)
	}
	if dryRun {
		s += " (dry run: nothing changed)"
	}
	return s
}
