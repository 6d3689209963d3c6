package config

import (
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

const redacted = "<redacted>"

// Secret is a string that never prints (mailtype.Secret): String, LogValue
// and MarshalText all give "<redacted>" (or "" when empty). Call Reveal to
// use it. It lives in mailtype so that the components that take a secret
// need not import config.
type Secret = mailtype.Secret

// URL is a connection string that may carry a password: a URL
// (postgres://u:pw@h/db, amqp://...) or a libpq key=value string
// ("host=h password=pw"). String, LogValue and MarshalText show it with
// the password replaced by "xxxxx" (net/url.URL.Redacted for a URL), and
// so is libpq's sslpassword (the passphrase of an encrypted sslkey); other
// parameters (sslmode, sslrootcert, sslcert, sslkey: paths, not secrets)
// show as they are. An unparsable one prints as "<redacted>".
type URL string

// Reveal returns the URL with its password.
func (u URL) Reveal() string { return string(u) }

func (u URL) String() string {
	s := string(u)
	if !strings.Contains(s, "://") {
		// libpq key=value form: password='quoted value' or password=word.
		return keyValuePassword.ReplaceAllString(s, "${1}xxxxx")
	}
	p, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	q := p.Query()
	if q.Has("password") || q.Has("sslpassword") {
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}

// keyValuePassword matches password= and sslpassword= of the key=value
// form with its value: quoted, or bare up to an unescaped space (a
// backslash escapes the next character in both, as libpq reads them).
var keyValuePassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:\\.|[^\s\\])*)`)

// LogValue keeps the password out of slog output.
func (u URL) LogValue() slog.Value { return slog.StringValue(u.String()) }

// MarshalText keeps the password out of YAML and JSON output.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// Secrets returns every secret value of the configuration: smtp.password,
// resend.api_key, webhooks.resend_secret (set directly or read from their
// *_file) and the passwords inside database.url, amqp.url and
// amqp.management_url, however those are written. NewRedactor takes them.
func (c *Config) Secrets() []string {
	s := []string{c.SMTP.Password.Reveal(), c.Resend.APIKey.Reveal(), c.Webhooks.ResendSecret.Reveal(), c.Bounces.Secret.Reveal()}
	for _, u := range []URL{c.Database.URL, c.AMQP.URL, c.AMQP.ManagementURL, c.Bounces.IMAPURL} {
		s = append(s, mailtype.ConnSecrets(string(u))...)
	}
	return s
}

// Redactor is a mailtype.Redactor for c.Secrets(): what mailsvc prints
// (errors, log lines) passes through it.
func (c *Config) Redactor() *mailtype.Redactor { return mailtype.NewRedactor(c.Secrets()...) }
