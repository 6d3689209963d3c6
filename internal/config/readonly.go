package config

import (
	"errors"
	"fmt"
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
