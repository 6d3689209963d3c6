package app

import (
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/console"
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
