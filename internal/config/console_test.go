package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/config"
)

// A bcrypt hash of "operator-demo" (cost 10) and the SHA-256 of "t0ken".
const (
	goodHash  = "$2a$10$wrlnzM2aukfAnMKH7gYcxehIlug7sK46k2rlZRyRsroNDfHwKgFnK"
	tokenHash = "b46c09677343261f0b439a472422225e3a230c9c094d6ab16762e2036b597053"
)

func loadConsole(t *testing.T, yamlText string) (*config.Config, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mailsvc.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yamlText), 0o600))
	return config.Load(file, envOf(valid))
}

func TestConsoleIsOffByDefault(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.Empty(t, c.Console.Addr)
	require.Equal(t, 8*time.Hour, c.Console.SessionTTL)
	require.Equal(t, config.ConsoleViewer, c.Console.TrustedProxyDefaultRole)
}

func TestConsoleConfigLoads(t *testing.T) {
	t.Parallel()
	c, err := loadConsole(t, `
console:
  addr: "127.0.0.1:8082"
  users:
    - {name: otto, role: operator, password_hash: "`+goodHash+`"}
  tokens:
    - {name: helpdesk, role: viewer, token_sha256: `+tokenHash+`}
  session_secret: "`+strings.Repeat("k", 32)+`"
  trusted_proxy_header: X-Forwarded-User
  trusted_proxy_addresses: [10.0.0.0/8, 127.0.0.1]
`)
	require.NoError(t, err)
	require.Equal(t, []config.ConsoleUser{{Name: "otto", Role: "operator", PasswordHash: goodHash}}, c.Console.Users)
	require.Equal(t, []config.ConsoleToken{{Name: "helpdesk", Role: "viewer", TokenSHA256: tokenHash}}, c.Console.Tokens)
	require.Equal(t, []string{"10.0.0.0/8", "127.0.0.1"}, c.Console.TrustedProxyAddresses)
	n, err := config.ParseCIDR("127.0.0.1")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1/32", n.String())
}

func TestConsoleMisconfigurationNamesTheKey(t *testing.T) {
	t.Parallel()
	for yamlText, want := range map[string]string{
		"console: {users: [{name: a, role: viewer, password_hash: secret}]}":                                                                      "console.users[0].password_hash: not a bcrypt hash",
		"console: {users: [{name: a, role: viewer, password_hash: \"" + goodHash + "\"}, {name: b, role: admin, password_hash: x}]}":              "console.users[1].role: must be viewer or operator, got \"admin\"",
		"console: {tokens: [{name: h, role: viewer, token_sha256: abc}]}":                                                                         "console.tokens[0].token_sha256: must be 64 hex characters",
		"console: {tokens: [{name: h, role: viewer, token_sha256: " + tokenHash + "}, {name: h, role: viewer, token_sha256: " + tokenHash + "}]}": "console.tokens[1].name: \"h\" is also console.tokens[0]'s name",
		"console: {session_secret: short}":                  "console.session_secret: must be at least 32 bytes",
		"console: {session_ttl: 10s}":                       "console.session_ttl: must be from 1m to 168h, got 10s",
		"console: {addr: \"127.0.0.1:8080\"}":               "console.addr: (\"127.0.0.1:8080\") must differ from http.addr and webhooks.addr",
		"console: {trusted_proxy_header: X-Forwarded-User}": "console.trusted_proxy_addresses: is required with console.trusted_proxy_header",
		"console: {trusted_proxy_addresses: [proxy.local]}": "console.trusted_proxy_addresses[0]: \"proxy.local\" is neither an address nor a CIDR",
		"console: {trusted_proxy_default_role: root}":       "console.trusted_proxy_default_role: must be viewer or operator, got \"root\"",
		"console: {public_url: \"ftp://x\"}":                "console.public_url: must be an http:// or https:// URL",
	} {
		_, err := loadConsole(t, yamlText)
		require.ErrorContains(t, err, want, yamlText)
	}
	_, err := loadConsole(t, "console: {session_secret: tooshort-but-secret}")
	require.NotContains(t, err.Error(), "tooshort-but-secret", "the secret is never shown")
}

func TestConsoleUnsafeConfigurationsAreRefused(t *testing.T) {
	t.Parallel()
	secretFile := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(strings.Repeat("f", 32)), 0o600))
	// A bcrypt hash of "x" at cost 4.
	const cheapHash = "$2a$04$0ejh4Gtvvu4/yvchN6WiYOjKWQ3IHk6m1OGxQUxG6sq7C2kEa.7OO"
	user := "users: [{name: otto, role: operator, password_hash: \"" + goodHash + "\"}]"
	for yamlText, want := range map[string]string{
		"console: {session_secret: \"" + strings.Repeat("k", 32) + "\", session_secret_file: " + secretFile + "}":                                                    "console.session_secret and console.session_secret_file are both set: set one of them",
		"console: {tokens: [{name: a, role: viewer, token_sha256: " + tokenHash + "}, {name: b, role: operator, token_sha256: " + strings.ToUpper(tokenHash) + "}]}": "console.tokens[1].token_sha256: is also console.tokens[0]'s: one token would sign in as either",
		"console: {addr: \"127.0.0.1:8082\"}": "console.addr: is set, but nobody could sign in: configure console.users, console.tokens or console.trusted_proxy_header",
		"console: {" + user + ", trusted_proxy_header: X-User, trusted_proxy_addresses: [10.0.0.1, 0.0.0.0/0]}":                     "console.trusted_proxy_addresses[1]: \"0.0.0.0/0\" is too wide",
		"console: {" + user + ", trusted_proxy_header: X-User, trusted_proxy_addresses: [\"::/0\"]}":                                "console.trusted_proxy_addresses[0]: \"::/0\" is too wide",
		"console: {" + user + ", trusted_proxy_header: X-User, trusted_proxy_addresses: [\"::ffff:0.0.0.0/96\"]}":                   "console.trusted_proxy_addresses[0]: \"::ffff:0.0.0.0/96\" is too wide (an IPv4 network wider than /8, an IPv6 one wider than /16, or IPv4 written as IPv6)",
		"console: {" + user + ", trusted_proxy_header: X-User, trusted_proxy_addresses: [0.0.0.0/1]}":                               "console.trusted_proxy_addresses[0]: \"0.0.0.0/1\" is too wide",
		"console: {" + user + ", trusted_proxy_operator_groups: [admins]}":                                                          "console.trusted_proxy_operator_groups: is set, but console.trusted_proxy_header is not",
		"console: {" + user + ", trusted_proxy_default_role: operator}":                                                             "console.trusted_proxy_default_role: is set, but console.trusted_proxy_header is not",
		"console: {users: [{name: otto, role: operator, password_hash: \"" + strings.Replace(goodHash, "$10$", "$15$", 1) + "\"}]}": "console.users[0].password_hash: has bcrypt cost 15, above 14",
		"console: {trusted_proxy_role_header: X-Groups}":                                                                            "console.trusted_proxy_role_header: is set, but console.trusted_proxy_header is not",
		"console: {users: [{name: otto, role: operator, password_hash: \"" + cheapHash + "\"}]}":                                    "console.users[0].password_hash: has bcrypt cost 4, below 10",
	} {
		_, err := loadConsole(t, yamlText)
		require.ErrorContains(t, err, want, yamlText)
	}
	_, err := loadConsole(t, "console: {addr: \"127.0.0.1:8082\", "+user+", trusted_proxy_header: X-User, trusted_proxy_addresses: [10.0.0.0/8]}")
	require.NoError(t, err)
	// A TLS proxy that only forwards: its addresses alone make its
	// X-Forwarded-For the client's address for the login limit.
	_, err = loadConsole(t, "console: {addr: \"127.0.0.1:8082\", "+user+", trusted_proxy_addresses: [10.1.2.3]}")
	require.NoError(t, err)
}
