package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// loadedTLS is what Load read from the TLS files: the client
// configurations of SMTP and AMQP (nil when none of their tls_* keys is
// set) and every certificate read, for `config check` and the start-up log.
type loadedTLS struct {
	smtp, amqp *tls.Config
	certs      []tlsconfig.Cert
}

// SMTPTLS returns a copy of the SMTP client's TLS configuration that Load
// read from smtp.tls_*, or nil when none of those keys is set (the
// provider then verifies against the system roots, for smtp.host).
func (c *Config) SMTPTLS() *tls.Config { return cloneTLS(c.tls.smtp) }

// AMQPTLS returns a copy of the TLS configuration for amqps:// that Load
// read from amqp.tls_*, or nil when none of those keys is set (system
// roots, the URL's host).
func (c *Config) AMQPTLS() *tls.Config { return cloneTLS(c.tls.amqp) }

// Certificates describes every certificate Load read: from smtp.tls_*,
// amqp.tls_* and the sslrootcert and sslcert files of database.url.
func (c *Config) Certificates() []tlsconfig.Cert { return slices.Clone(c.tls.certs) }

func cloneTLS(t *tls.Config) *tls.Config {
	if t == nil {
		return nil
	}
	return t.Clone()
}

func (c *Config) smtpTLSSource() tlsconfig.Source {
	s := c.SMTP
	return tlsconfig.Source{Keys: tlsconfig.KeysOf("smtp"), CAFile: s.TLSCAFile, CertFile: s.TLSCertFile,
		KeyFile: s.TLSKeyFile, ServerName: s.TLSServerName}
}

func (c *Config) amqpTLSSource() tlsconfig.Source {
	a := c.AMQP
	return tlsconfig.Source{Keys: tlsconfig.KeysOf("amqp"), CAFile: a.TLSCAFile, CertFile: a.TLSCertFile,
		KeyFile: a.TLSKeyFile, ServerName: a.TLSServerName}
}

// setKeys lists the keys of s that are set.
func setKeys(s tlsconfig.Source) []string {
	var out []string
	for _, kv := range [][2]string{{s.Keys.CA, s.CAFile}, {s.Keys.Cert, s.CertFile}, {s.Keys.Key, s.KeyFile}, {s.Keys.ServerName, s.ServerName}} {
		if kv[1] != "" {
			out = append(out, kv[0])
		}
	}
	return out
}

// amqpURLTLSParams are amqp091-go's own TLS parameters of an amqps:// URL;
// mailsvc configures TLS with the amqp.tls_* keys instead, one way only.
var amqpURLTLSParams = map[string]string{"cacertfile": "amqp.tls_ca_file", "certfile": "amqp.tls_cert_file",
	"keyfile": "amqp.tls_key_file", "server_name_indication": "amqp.tls_server_name"}

// validateTLS checks the TLS rules that need no file: TLS files only where
// TLS is certain (smtp.tls starttls or implicit, an amqps:// URL, a
// database sslmode that verifies), and no second way to name them.
func (c *Config) validateTLS(bad func(string, string, ...any)) {
	if m := c.SMTP.TLS; m == "none" || m == "opportunistic" {
		for _, k := range setKeys(c.smtpTLSSource()) {
			bad(k, "is set but smtp.tls is %s, which may send in clear: use starttls or implicit with TLS files", m)
		}
	}
	if u, err := url.Parse(c.AMQP.URL.Reveal()); err == nil {
		if u.Scheme == "amqp" {
			for _, k := range setKeys(c.amqpTLSSource()) {
				bad(k, "is set but amqp.url is amqp:// (plaintext): use amqps://, or remove the key")
			}
		}
		for _, p := range slices.Sorted(maps.Keys(amqpURLTLSParams)) {
			if u.Query().Has(p) {
				bad("amqp.url", "parameter %s is not used: set %s instead", p, amqpURLTLSParams[p])
			}
		}
	}
	params, err := pgParams(c.Database.URL.Reveal())
	if err != nil {
		bad("database.url", "%v", err)
		return
	}
	mode := params["sslmode"]
	if params["sslrootcert"] == "system" {
		mode = "verify-full" // pgx and libpq verify fully against the system roots then
	}
	for _, p := range []string{"sslrootcert", "sslcert", "sslkey"} {
		if params[p] != "" && mode != "verify-full" && mode != "verify-ca" {
			bad("database.url", "sets %s but sslmode is %q, which does not verify the server (prefer and allow even fall back to plaintext): use sslmode=verify-full", p, or(params["sslmode"], "prefer (the default)"))
			break
		}
	}
}

// loadTLS reads every TLS file the config names, at start, keeping the
// client configurations and the certificates' descriptions: the clients'
// (smtp, amqp, database.url), the attachment fetch stage's CAs and the
// bounce listener's certificate, so that `config check` refuses what
// serve would. Each error names its key.
func (c *Config) loadTLS(now time.Time) error {
	var errs []error
	c.tls = loadedTLS{}
	for _, x := range []struct {
		src tlsconfig.Source
		dst **tls.Config
	}{{c.smtpTLSSource(), &c.tls.smtp}, {c.amqpTLSSource(), &c.tls.amqp}} {
		if x.src.IsZero() {
			continue
		}
		cfg, certs, err := tlsconfig.Client(x.src, now)
		c.tls.certs = append(c.tls.certs, certs...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*x.dst = cfg
	}
	certs, err := databaseCerts(c.Database.URL.Reveal(), now)
	c.tls.certs = append(c.tls.certs, certs...)
	errs = append(errs, err)
	if f := c.Attachments.TLSCAFile; f != "" {
		_, cs, err := tlsconfig.ReadCAs("attachments.tls_ca_file", f)
		c.tls.certs = append(c.tls.certs, cs...)
		errs = append(errs, err)
	}
	if b := c.Bounces; b.TLSCertFile != "" && b.TLSKeyFile != "" {
		// Read as the listener reads it: an expired certificate is offered
		// still (a relay's STARTTLS to a bounce domain rarely verifies),
		// never a reason to refuse the start.
		if _, err := tls.LoadX509KeyPair(b.TLSCertFile, b.TLSKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("bounces.tls_cert_file, bounces.tls_key_file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// databaseCerts reads the sslrootcert, sslcert and sslkey files of a
// libpq connection string the way pgx will (it reads them again when the
// store connects): to fail at start naming the parameter, and to describe
// the certificates. An encrypted key (sslpassword) is checked for
// readability only.
func databaseCerts(dsn string, now time.Time) ([]tlsconfig.Cert, error) {
	params, err := pgParams(dsn)
	if err != nil {
		return nil, nil // validateTLS reported it
	}
	k := tlsconfig.DatabaseKeys
	var certs []tlsconfig.Cert
	var errs []error
	if f := params["sslrootcert"]; f != "" && f != "system" {
		_, cs, err := tlsconfig.ReadCerts(k.CA, f)
		certs, errs = append(certs, cs...), append(errs, err)
	}
	cert, key := params["sslcert"], params["sslkey"]
	if params["sslcertmode"] == "disable" || (cert == "" && key == "") {
		return certs, errors.Join(errs...)
	}
	switch {
	case cert == "" || key == "":
		errs = append(errs, fmt.Errorf("database.url: sslcert and sslkey go together (a client certificate and its key)"))
	case params["sslpassword"] != "":
		leaves, cs, err := tlsconfig.ReadCerts(k.Cert, cert)
		certs, errs = append(certs, cs...), append(errs, err)
		if err == nil && now.After(leaves[0].NotAfter) {
			errs = append(errs, fmt.Errorf("%s: %s expired at %s: the server will refuse it", k.Cert, cert,
				leaves[0].NotAfter.UTC().Format(time.RFC3339)))
		}
		if _, err := os.ReadFile(key); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.Key, err))
		}
	default:
		_, cs, err := tlsconfig.ReadKeyPair(k, cert, key, now)
		certs, errs = append(certs, cs...), append(errs, err)
	}
	return certs, errors.Join(errs...)
}

// pgParams returns the parameters of a libpq connection string: the query
// of a postgres:// URL, or the pairs of the key=value form (values bare or
// in single quotes, with backslash escapes).
func pgParams(dsn string) (map[string]string, error) {
	out := map[string]string{}
	if strings.Contains(dsn, "://") {
		return pgURLParams(dsn)
	}
	s := strings.TrimSpace(dsn)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, errors.New("is not a postgres:// URL or a key=value connection string")
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t\n")
		val, rest, err := pgValue(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out[key], s = val, strings.TrimLeft(rest, " \t\n")
	}
	return out, nil
}

// pgURLParams returns the query parameters of a postgres:// URL as libpq
// and pgx read them, refusing what the two parsers could read differently
// from net/url, so that what is checked here is what the driver uses: a
// literal '#' (net/url ends the URL there, pgx reads on), a parameter
// given twice (the driver takes the last), and pgx's `ssl` alias (ssl=true
// is sslmode=require: no host check). Values are percent-decoded as libpq
// does, '+' staying a '+'.
func pgURLParams(dsn string) (map[string]string, error) {
	if strings.Contains(dsn, "#") {
		return nil, errors.New("contains a '#': write it percent-encoded (%23); the driver and this check would read the URL differently")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, errors.New("is not a valid URL")
	}
	out := map[string]string{}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		key, err1 := url.PathUnescape(k)
		val, err2 := url.PathUnescape(v)
		switch _, seen := out[key]; {
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("parameter %q is not valid percent-encoding", k)
		case seen:
			return nil, fmt.Errorf("parameter %s is given twice: give it once", key)
		case key == "ssl":
			return nil, errors.New("parameter ssl is the driver's alias for sslmode=require, which does not check the host: write sslmode=verify-full instead")
		}
		out[key] = val
	}
	return out, nil
}

// pgValue reads one value of the key=value form from the start of s.
func pgValue(s string) (val, rest string, err error) {
	var b strings.Builder
	quoted := strings.HasPrefix(s, "'")
	if quoted {
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case quoted && ch == '\'':
			return b.String(), s[i+1:], nil
		case !quoted && (ch == ' ' || ch == '\t' || ch == '\n'):
			return b.String(), s[i:], nil
		default:
			b.WriteByte(ch)
		}
	}
	if quoted {
		return "", "", errors.New("unterminated quoted value")
	}
	return b.String(), "", nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
