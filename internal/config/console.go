package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The roles of the console (docs/console.md, "Roles"): a viewer reads
// everything, an operator also acts.
const (
	ConsoleViewer   = "viewer"
	ConsoleOperator = "operator"
)

// Console configures the support console (internal/console): web pages
// and a JSON API on a listener of its own, off while Addr is "".
type Console struct {
	// Addr is its host:port; "" (the default) turns it off. It must
	// differ from http.addr and webhooks.addr.
	Addr string `mapstructure:"addr" yaml:"addr"`
	// PublicURL is the address people open (https://support.shop.example),
	// shown in logs and links; "" means none is known.
	PublicURL string `mapstructure:"public_url" yaml:"public_url"`
	// Users log in with a password on the login page.
	Users []ConsoleUser `mapstructure:"users" yaml:"users"`
	// Tokens authenticate API clients (Authorization: Bearer TOKEN).
	Tokens []ConsoleToken `mapstructure:"tokens" yaml:"tokens"`
	// SessionSecret signs the session cookies (HMAC-SHA256), at least 32
	// bytes; "" means a random one per process: sessions then end at a
	// restart and are not accepted by another replica.
	SessionSecret Secret `mapstructure:"session_secret" yaml:"session_secret"`
	// SessionSecretFile, when set, is read for SessionSecret.
	SessionSecretFile string `mapstructure:"session_secret_file" yaml:"session_secret_file"`
	// SessionTTL is how long a login lasts; default 8h.
	SessionTTL time.Duration `mapstructure:"session_ttl" yaml:"session_ttl"`
	// TrustedProxyHeader names the header an authenticating reverse proxy
	// sets to the user's name (X-Forwarded-User); "" turns it off. It is
	// believed only from a peer in TrustedProxyAddresses.
	TrustedProxyHeader string `mapstructure:"trusted_proxy_header" yaml:"trusted_proxy_header"`
	// TrustedProxyRoleHeader, when set, names a header of comma-separated
	// groups (X-Forwarded-Groups); a user with one of
	// TrustedProxyOperatorGroups is an operator, others get
	// TrustedProxyDefaultRole.
	TrustedProxyRoleHeader     string   `mapstructure:"trusted_proxy_role_header" yaml:"trusted_proxy_role_header"`
	TrustedProxyOperatorGroups []string `mapstructure:"trusted_proxy_operator_groups" yaml:"trusted_proxy_operator_groups"`
	// TrustedProxyDefaultRole is the role of a proxy's user without an
	// operator group: viewer (the default) or operator.
	TrustedProxyDefaultRole string `mapstructure:"trusted_proxy_default_role" yaml:"trusted_proxy_default_role"`
	// TrustedProxyAddresses are the CIDRs (or single addresses) of the
	// proxy; required with TrustedProxyHeader.
	TrustedProxyAddresses []string `mapstructure:"trusted_proxy_addresses" yaml:"trusted_proxy_addresses"`
}

// ConsoleUser is one person who logs in with a password.
type ConsoleUser struct {
	Name string `mapstructure:"name" yaml:"name"`
	// Role is viewer or operator.
	Role string `mapstructure:"role" yaml:"role"`
	// PasswordHash is the password's bcrypt hash ($2a$, $2b$ or $2y$).
	PasswordHash string `mapstructure:"password_hash" yaml:"password_hash"`
}

// ConsoleToken is one API client's static token, kept as a hash.
type ConsoleToken struct {
	Name string `mapstructure:"name" yaml:"name"`
	// Role is viewer or operator.
	Role string `mapstructure:"role" yaml:"role"`
	// TokenSHA256 is the hex SHA-256 of the token (64 hex characters).
	TokenSHA256 string `mapstructure:"token_sha256" yaml:"token_sha256"`
}

// MinSessionSecret is the shortest console.session_secret, in bytes.
const MinSessionSecret = 32

// validateConsole checks console.*: an address of its own, names unique
// across users and tokens, hashes that parse, a trusted header only with
// the proxy's addresses.
func (c *Config) validateConsole(bad func(string, string, ...any)) {
	k := c.Console
	if k.Addr != "" {
		if _, port, err := net.SplitHostPort(k.Addr); err != nil || port == "" {
			bad("console.addr", "must be host:port or :port, got %q", k.Addr)
		} else if sameListener(k.Addr, c.HTTP.Addr) || (c.Webhooks.Addr != "" && sameListener(k.Addr, c.Webhooks.Addr)) {
			bad("console.addr", "(%q) must differ from http.addr and webhooks.addr: the console gets a listener of its own", k.Addr)
		}
	}
	if k.PublicURL != "" {
		if u, err := url.Parse(k.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("console.public_url", "must be an http:// or https:// URL, got %q", k.PublicURL)
		}
	}
	if k.SessionTTL < time.Minute || k.SessionTTL > 7*24*time.Hour {
		bad("console.session_ttl", "must be from 1m to 168h, got %s", k.SessionTTL)
	}
	if s := k.SessionSecret; s != "" && len(s.Reveal()) < MinSessionSecret {
		bad("console.session_secret", "must be at least %d bytes (e.g. `openssl rand -hex 32`)", MinSessionSecret)
	}
	if k.Addr != "" && len(k.Users) == 0 && len(k.Tokens) == 0 && k.TrustedProxyHeader == "" {
		bad("console.addr", "is set, but nobody could sign in: configure console.users, console.tokens or console.trusted_proxy_header")
	}
	names := map[string]string{}
	for i, u := range k.Users {
		key := fmt.Sprintf("console.users[%d]", i)
		consoleName(bad, names, key, u.Name)
		consoleRole(bad, key+".role", u.Role)
		if cost, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			bad(key+".password_hash", "not a bcrypt hash (make one with: htpasswd -bnBC 10 \"\" PASSWORD | tr -d ':\\n')")
		} else if cost < MinBcryptCost {
			bad(key+".password_hash", "has bcrypt cost %d, below %d: too cheap to guess against (make one with: htpasswd -bnBC 10 \"\" PASSWORD | tr -d ':\\n')", cost, MinBcryptCost)
		} else if cost > MaxBcryptCost {
			bad(key+".password_hash", "has bcrypt cost %d, above %d: each login would hold a CPU for seconds (make one with: htpasswd -bnBC 10 \"\" PASSWORD | tr -d ':\\n')", cost, MaxBcryptCost)
		}
	}
	c.validateTokens(bad, names)
	c.validateTrustedProxy(bad)
}

// MinBcryptCost is the lowest bcrypt cost of a console.users password
// hash.
const MinBcryptCost = 10

// MaxBcryptCost is the highest: each step doubles a login's CPU time, and
// cost 14 takes about a second on one core of a small machine.
const MaxBcryptCost = 14

func (c *Config) validateTokens(bad func(string, string, ...any), names map[string]string) {
	sums := map[string]string{}
	for i, t := range c.Console.Tokens {
		key := fmt.Sprintf("console.tokens[%d]", i)
		consoleName(bad, names, key, t.Name)
		consoleRole(bad, key+".role", t.Role)
		if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != 32 {
			bad(key+".token_sha256", "must be 64 hex characters, the SHA-256 of the token (printf %%s TOKEN | sha256sum)")
		} else if other, ok := sums[string(b)]; ok {
			bad(key+".token_sha256", "is also %s's: one token would sign in as either (give each its own token)", other)
		} else {
			sums[string(b)] = key
		}
	}
}

// CheckSessionSecretSources refuses console.session_secret and
// console.session_secret_file both set (which one wins would be a
// guess); Load calls it before it reads the file.
func (k Console) CheckSessionSecretSources() error {
	if k.SessionSecret != "" && k.SessionSecretFile != "" {
		return fmt.Errorf("console.session_secret and console.session_secret_file are both set: set one of them")
	}
	return nil
}

func (c *Config) validateTrustedProxy(bad func(string, string, ...any)) {
	k := c.Console
	consoleRole(bad, "console.trusted_proxy_default_role", k.TrustedProxyDefaultRole)
	if k.TrustedProxyHeader != "" && !validHeaderName(k.TrustedProxyHeader) {
		bad("console.trusted_proxy_header", "must be a header name, got %q", k.TrustedProxyHeader)
	}
	if k.TrustedProxyRoleHeader != "" && !validHeaderName(k.TrustedProxyRoleHeader) {
		bad("console.trusted_proxy_role_header", "must be a header name, got %q", k.TrustedProxyRoleHeader)
	}
	if k.TrustedProxyHeader != "" && len(k.TrustedProxyAddresses) == 0 {
		bad("console.trusted_proxy_addresses", "is required with console.trusted_proxy_header: the header is believed only from the proxy's addresses")
	}
	for _, s := range []struct {
		key string
		set bool
	}{
		{"console.trusted_proxy_role_header", k.TrustedProxyRoleHeader != ""},
		{"console.trusted_proxy_operator_groups", len(k.TrustedProxyOperatorGroups) > 0},
		{"console.trusted_proxy_default_role", k.TrustedProxyDefaultRole != "" && k.TrustedProxyDefaultRole != ConsoleViewer},
	} {
		if s.set && k.TrustedProxyHeader == "" {
			bad(s.key, "is set, but console.trusted_proxy_header is not: it applies only to users the proxy's header names")
		}
	}
	for i, a := range k.TrustedProxyAddresses {
		key := fmt.Sprintf("console.trusted_proxy_addresses[%d]", i)
		if n, err := ParseCIDR(a); err != nil {
			bad(key, "%v", err)
		} else if broad(n) {
			bad(key, "%q is too wide (an IPv4 network wider than /8, an IPv6 one wider than /16, or IPv4 written as IPv6): "+
				"that trusts the header from nearly anyone; name the proxy's addresses", a)
		}
	}
}

// broad reports whether n is too wide to be one proxy's addresses: an
// IPv4 network wider than /8, an IPv6 one wider than /16, or an IPv4
// network written in IPv6 (::ffff:0:0/96 matches every IPv4 peer).
func broad(n *net.IPNet) bool {
	ones, bits := n.Mask.Size()
	switch {
	case bits == 32:
		return ones < 8
	case n.IP.To4() != nil:
		return true
	}
	return ones < 16
}

// ParseCIDR reads one entry of console.trusted_proxy_addresses: a CIDR
// (10.0.0.0/8) or a single address (127.0.0.1, as /32 or /128).
func ParseCIDR(s string) (*net.IPNet, error) {
	if !strings.Contains(s, "/") {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR", s)
		}
		bits := 128
		if ip.To4() != nil {
			ip, bits = ip.To4(), 32
		}
		return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, nil
	}
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		return nil, fmt.Errorf("%q is neither an address nor a CIDR", s)
	}
	return n, nil
}

func consoleName(bad func(string, string, ...any), seen map[string]string, key, name string) {
	switch {
	case name == "" || len(name) > 64 || strings.ContainsFunc(name, notVisibleASCII):
		bad(key+".name", "must be 1 to 64 visible ASCII characters, got %q", name)
	case seen[name] != "":
		bad(key+".name", "%q is also %s's name: names are unique across users and tokens", name, seen[name])
	default:
		seen[name] = key
	}
}

func consoleRole(bad func(string, string, ...any), key, role string) {
	if role != ConsoleViewer && role != ConsoleOperator {
		bad(key, "must be viewer or operator, got %q", role)
	}
}
