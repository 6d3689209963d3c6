package config

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// LoadReadOnly builds the configuration as Load does (defaults, the YAML
// file at path, the MAILSVC_* environment, in that order of precedence;
// an unknown key or a malformed value is an error) for the commands that
// only read the database (`mail show`, `mail list`, `audit list`,
// `provider status`, `suppression list` and `show`, ...), and checks only
// what they use: database.url, which must be set (it has a default) and
// be a postgres:// URL or a key=value connection string. Nothing else is
// validated and no secret or TLS file is read, so a support engineer
// needs neither the sending configuration (mail.from, the providers'
// credentials) nor access to its secret files. The error names
// database.url.
func LoadReadOnly(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	c, err := decode(path, lookupEnv)
	if err != nil {
		return nil, err
	}
	var errs []error
	c.validateDatabase(func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	})
	if err := errors.Join(errs...); err != nil {
		return nil, c.Redactor().Error(err)
	}
	return c, nil
}

// LoadBroker builds the configuration as LoadReadOnly does for the
// commands that only read the dead-letter queue (`dlq list`, `dlq show`),
// and checks only what they use: amqp.url (an amqp:// or amqps:// URL,
// without TLS parameters of its own), amqp.dead_letter_queue, and the
// amqp.tls_* files, which it reads. The database, the sending
// configuration and the other secrets are neither checked nor read. The
// error names each bad key.
func LoadBroker(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	c, err := decode(path, lookupEnv)
	if err != nil {
		return nil, err
	}
	var errs []error
	c.validateBroker(func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	})
	if err := errors.Join(errs...); err != nil {
		return nil, c.Redactor().Error(err)
	}
	if src := c.amqpTLSSource(); !src.IsZero() {
		cfg, certs, err := tlsconfig.Client(src, time.Now())
		if err != nil {
			return nil, c.Redactor().Error(err)
		}
		c.tls.amqp, c.tls.certs = cfg, certs
	}
	return c, nil
}

// validateBroker checks the keys of LoadBroker.
func (c *Config) validateBroker(bad func(string, string, ...any)) {
	if u, err := url.Parse(c.AMQP.URL.Reveal()); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") ||
		!strings.HasPrefix(strings.ToLower(c.AMQP.URL.Reveal()), u.Scheme+"://") {
		bad("amqp.url", "must be an amqp:// or amqps:// URL")
	} else {
		for _, p := range slices.Sorted(maps.Keys(amqpURLTLSParams)) {
			if u.Query().Has(p) {
				bad("amqp.url", "parameter %s is not used: set %s instead", p, amqpURLTLSParams[p])
			}
		}
		if u.Scheme == "amqp" {
			for _, k := range setKeys(c.amqpTLSSource()) {
				bad(k, "is set but amqp.url is amqp:// (plaintext): use amqps://, or remove the key")
			}
		}
	}
	if c.AMQP.DeadLetterQueue == "" {
		bad("amqp.dead_letter_queue", "must not be empty")
	}
}
