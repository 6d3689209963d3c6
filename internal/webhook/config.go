package webhook

import (
	"encoding/base64"
	"net"
	"strings"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Settings is the `webhooks` section of configs/mailsvc.yaml, as the
// configuration file spells it: the mapstructure and yaml names are the
// keys (webhooks.addr, ...). internal/config decodes the section into it
// (and reads ResendSecretFile into ResendSecret); Check holds its rules
// and Config maps it onto the server's Config. Every key defaults to ""
// (off).
type Settings struct {
	// Addr is its host:port; "" (the default) turns it off.
	Addr string `mapstructure:"addr" yaml:"addr"`
	// ResendSecret is the signing secret of the Resend webhook endpoint,
	// "whsec_" and base64, as Resend shows it; required with Addr.
	ResendSecret mailtype.Secret `mapstructure:"resend_secret" yaml:"resend_secret"`
	// ResendSecretFile, when set, is read for ResendSecret.
	ResendSecretFile string `mapstructure:"resend_secret_file" yaml:"resend_secret_file"`
}

// Report receives one violation of a configuration rule: the full key
// it is about and the message (a format and its arguments).
type Report func(key, format string, args ...any)

// Check reports every rule of the webhooks.* keys that s breaks, in a
// fixed order, each under its full key: an address like http.addr's, and
// with it the Resend signing secret, "whsec_" followed by base64 (a
// message never shows the secret). That the address differs from
// http.addr is the configuration's check, which spans sections.
func (s Settings) Check(bad Report) {
	if s.Addr != "" {
		if _, port, err := net.SplitHostPort(s.Addr); err != nil || port == "" {
			bad("webhooks.addr", "must be host:port or :port, got %q", s.Addr)
		}
		if s.ResendSecret == "" {
			bad("webhooks.resend_secret", "is required with webhooks.addr: the signing secret of the Resend webhook endpoint, whsec_... (or set webhooks.resend_secret_file, or MAILSVC_WEBHOOKS_RESEND_SECRET)")
		}
	}
	if s.ResendSecret != "" {
		key, ok := strings.CutPrefix(s.ResendSecret.Reveal(), "whsec_")
		if b, err := base64.StdEncoding.DecodeString(key); !ok || err != nil || len(b) == 0 {
			bad("webhooks.resend_secret", "must be whsec_ followed by base64, as Resend shows the endpoint's signing secret")
		}
	}
}

// Config maps the webhooks.* keys onto the server's Config; the fields
// other sections set (RetentionWindow) stay for the caller.
func (s Settings) Config() Config { return Config{Addr: s.Addr, ResendSecret: s.ResendSecret} }
