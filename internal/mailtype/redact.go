package mailtype

import (
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Masked replaces a secret wherever Redactor finds one.
const Masked = "xxxxx"

// Redactor replaces every occurrence of known secret values in free text
// with Masked: the last line of defence for text that mailsvc did not
// write itself (a driver's error quoting a connection string it could not
// parse, a server's reply). Each secret is also matched in its JSON-escaped
// and percent-encoded forms, the two ways a log line or a URL carries it.
// The zero Redactor and a nil *Redactor replace nothing. Safe for
// concurrent use.
type Redactor struct {
	r *strings.Replacer
}

// NewRedactor returns a Redactor for the given secret values; empty ones
// are ignored. Longer secrets are matched first, so that a secret that
// contains another is masked whole.
func NewRedactor(secrets ...string) *Redactor {
	var forms []string
	seen := map[string]bool{}
	for _, s := range secrets {
		for _, f := range secretForms(s) {
			if f != "" && !seen[f] {
				seen[f] = true
				forms = append(forms, f)
			}
		}
	}
	if len(forms) == 0 {
		return &Redactor{}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Masked)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// secretForms is s as it may appear in text: as it is, JSON-escaped
// (without the quotes), percent-encoded as a URL's userinfo and query
// carry it.
func secretForms(s string) []string {
	if s == "" {
		return nil
	}
	j, _ := json.Marshal(s)
	return []string{s, string(j[1 : len(j)-1]), url.QueryEscape(s), url.PathEscape(s),
		strings.ReplaceAll(url.QueryEscape(s), "+", "%20")}
}

// Redact returns text with every known secret replaced by Masked.
func (r *Redactor) Redact(text string) string {
	if r == nil || r.r == nil {
		return text
	}
	return r.r.Replace(text)
}

// Error wraps err so that its text is redacted; errors.Is and errors.As
// still see the chain. A nil err stays nil.
func (r *Redactor) Error(err error) error {
	if err == nil || r == nil || r.r == nil {
		return err
	}
	return &redactedError{err: err, text: r.Redact(err.Error())}
}

type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// Writer returns a writer that redacts what it passes on to w. It suits
// line-oriented output (one slog record, one message per Write): a secret
// split across two writes is not seen.
func (r *Redactor) Writer(w io.Writer) io.Writer {
	if r == nil || r.r == nil {
		return w
	}
	return redactingWriter{r: r, w: w}
}

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

// Write passes the redacted p on and reports len(p) when that succeeded,
// as a caller of an io.Writer expects.
func (rw redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(rw.w, rw.r.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ConnSecrets returns the secret values in a connection string, however it
// is written and even when no driver can parse it: the password of a URL's
// userinfo (everything between the first ':' after the scheme and its
// slashes, "://" or a malformed ":/" or ":", and the last '@',
// as written and percent-decoded), password= and sslpassword= in a URL's
// query, and password and sslpassword of libpq's keyword/value form, with
// or without spaces around '=', quoted (an unterminated quote runs to the
// end) or bare, as written and with libpq's backslash escapes undone.
func ConnSecrets(s string) []string {
	var out []string
	add := func(v string) {
		if v != "" {
			out = append(out, v)
		}
		if d, err := url.PathUnescape(v); err == nil && d != v && d != "" {
			out = append(out, d)
		}
	}
	if m := urlScheme.FindStringIndex(s); m != nil {
		rest := s[m[1]:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
		for _, m := range queryPassword.FindAllStringSubmatch(s, -1) {
			add(m[1])
			if d, err := url.QueryUnescape(m[1]); err == nil {
				add(d)
			}
		}
	}
	for _, m := range keyValueSecret.FindAllStringSubmatch(s, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(v[1:], "'")
		}
		add(v)
		add(libpqUnescape.ReplaceAllString(v, "$1"))
	}
	return out
}

var (
	// urlScheme is a URL's scheme and the slashes after it, if any:
	// "amqp://", and the malformed "amqp:/" and "amqp:" too.
	urlScheme = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*:/*`)
	// queryPassword is password= or sslpassword= in a URL's query.
	queryPassword = regexp.MustCompile(`(?i)[?&](?:ssl)?password=([^&#]*)`)
	// keyValueSecret is password or sslpassword of the keyword/value form
	// with its value: quoted (to the closing quote, or the end) or bare.
	keyValueSecret = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])+)`)
	// libpqUnescape undoes a backslash escape.
	libpqUnescape = regexp.MustCompile(`\\(.)`)
)
