package mailtype

import "log/slog"

// Secret is a string that never prints: String, LogValue and MarshalText
// all give "<redacted>" (or "" when empty). Call Reveal to use it. The
// config keys smtp.password and resend.api_key are Secrets.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String is "<redacted>", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

// LogValue keeps the secret out of slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps the secret out of YAML and JSON output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
