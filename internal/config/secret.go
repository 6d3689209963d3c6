package config

import (
	"log/slog"
	"net/url"
)

const redacted = "<redacted>"

// Secret is a string that never prints: String, LogValue and MarshalText
// all give "<redacted>" (or "" when empty). Call Reveal to use it.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// LogValue keeps the secret out of slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps the secret out of YAML and JSON output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// URL is a connection URL that may carry a password. String, LogValue and
// MarshalText show it with the password replaced by "xxxxx"
// (net/url.URL.Redacted); an unparsable URL prints as "<redacted>".
type URL string

// Reveal returns the URL with its password.
func (u URL) Reveal() string { return string(u) }

func (u URL) String() string {
	p, err := url.Parse(string(u))
	if err != nil {
		return redacted
	}
	return p.Redacted()
}

// LogValue keeps the password out of slog output.
func (u URL) LogValue() slog.Value { return slog.StringValue(u.String()) }

// MarshalText keeps the password out of YAML and JSON output.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }
