package app

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

func TestConsoleConfigParsesTheCredentials(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("t0ken"))
	cfg := &config.Config{Console: config.Console{Addr: "127.0.0.1:0",
		Users:              []config.ConsoleUser{{Name: "otto", Role: "operator", PasswordHash: "$2a$10$wrlnzM2aukfAnMKH7gYcxehIlug7sK46k2rlZRyRsroNDfHwKgFnK"}},
		Tokens:             []config.ConsoleToken{{Name: "helpdesk", Role: "viewer", TokenSHA256: "b46c09677343261f0b439a472422225e3a230c9c094d6ab16762e2036b597053"}},
		TrustedProxyHeader: "X-Forwarded-User", TrustedProxyDefaultRole: "viewer", TrustedProxyAddresses: []string{"10.0.0.0/8", "127.0.0.1"},
	}}
	cc, err := ConsoleConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, []console.Credential{{Name: "otto", Role: console.Operator, Hash: []byte(cfg.Console.Users[0].PasswordHash)}}, cc.Users)
	require.Equal(t, []console.Credential{{Name: "helpdesk", Role: console.Viewer, Hash: sum[:]}}, cc.Tokens)
	require.Len(t, cc.Proxy.Addresses, 2)
	require.Equal(t, "127.0.0.1/32", cc.Proxy.Addresses[1].String())
	require.Nil(t, cc.SessionSecret, "unset: a random one per process")
	// Off unless console.addr is set: no part is built.
	w := &wiring{cfg: &config.Config{}}
	parts, err := w.buildConsole()
	require.NoError(t, err)
	require.Empty(t, parts)
}

// The console replays at most its limit per action, and says how many of
// how many, and how to go on; its dry run says so and changes nothing.
func TestConsoleReplayIsBounded(t *testing.T) {
	t.Parallel()
	n := brokertest.New(t)
	brokertest.DeclareExchange(t, n.InputExchange)
	brokertest.DeclareExchange(t, n.DeadLetterExchange)
	brokertest.DeclareQueue(t, n.Queue, n.InputExchange, "#", nil)
	brokertest.DeclareQueue(t, n.DeadLetterQueue, n.DeadLetterExchange, "#", nil)
	var msgs []broker.Message
	for i := range 5 {
		msgs = append(msgs, broker.Message{Exchange: n.DeadLetterExchange, RoutingKey: "order.confirmed", MessageID: fmt.Sprint("ev-", i),
			Body: []byte(`{}`), Persistent: true, Headers: map[string]any{deadletter.HeaderOriginalRoutingKey: "order.confirmed"}})
	}
	publishRaw(t, msgs...)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 5 }, 10*time.Second, 10*time.Millisecond)
	cfg := &config.Config{AMQP: config.AMQP{URL: config.URL(brokertest.URL()), InputExchange: n.InputExchange,
		DeadLetterQueue: n.DeadLetterQueue}}
	replay := consoleReplayDLQ(cfg, 3)
	ctx := context.Background()
	s, err := replay(ctx, true)
	require.NoError(t, err)
	require.Equal(t, "would replay 3 of 5 dead-lettered messages to "+n.InputExchange+
		"; the console replays at most 3 at a time: run it again, or use `mailsvc dlq replay` for a large queue (dry run: nothing changed)", s)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 5 }, 10*time.Second, 10*time.Millisecond)
	s, err = replay(ctx, false)
	require.NoError(t, err)
	require.Equal(t, "replayed 3 of 5 dead-lettered messages to "+n.InputExchange+
		"; the console replays at most 3 at a time: run it again, or use `mailsvc dlq replay` for a large queue", s)
	require.Eventually(t, func() bool { return brokertest.Depth(t, n.DeadLetterQueue) == 2 }, 10*time.Second, 10*time.Millisecond)
	s, err = replay(ctx, false)
	require.NoError(t, err)
	require.Equal(t, "replayed 2 of 2 dead-lettered messages to "+n.InputExchange, s)
	require.Equal(t, 5, brokertest.Depth(t, n.Queue))
}
