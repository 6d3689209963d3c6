package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of environment overrides: key "a.b_c" is read
// from MAILSVC_A_B_C.
const EnvPrefix = "MAILSVC"

// EnvName returns the environment variable that overrides key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every config key, sorted.
func Keys() []string {
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Load builds the configuration from defaults, the YAML file at path (none
// when path is ""), and the environment as seen through lookupEnv (pass
// os.LookupEnv). It then reads secret files, validates, and reads the TLS
// files (certificates and keys of smtp.tls_*, amqp.tls_* and the ssl*
// parameters of database.url; tls.go). The error names every offending
// key; a file that cannot be read or holds an unknown key is an error.
func Load(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	c, err := decode(path, lookupEnv)
	if err != nil {
		return nil, err
	}
	// What follows may quote a value; none may quote a secret.
	if err := c.readSecretFiles(); err != nil {
		return nil, c.Redactor().Error(err)
	}
	if err := errors.Join(c.Validate(), c.loadTLS(time.Now())); err != nil {
		return nil, c.Redactor().Error(err)
	}
	return c, nil
}

// decode merges the defaults, the file at path and the environment, and
// decodes them: Load's first step, and LoadReadOnly's.
func decode(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	if path != "" {
		if err := mergeFile(v, path); err != nil {
			return nil, err
		}
	}
	for _, k := range Keys() {
		if val, ok := lookupEnv(EnvName(k)); ok {
			v.Set(k, val)
		}
	}
	var c Config
	if err := v.UnmarshalExact(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		rejectBareDuration, rejectLooseBool, rejectEmptyNumber, mapstructure.StringToTimeDurationHookFunc(), splitTrimmedList))); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// rejectBareDuration refuses a number where a duration is expected: YAML
// "send_timeout: 30" would otherwise mean 30 nanoseconds.
func rejectBareDuration(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("duration %v has no unit: write e.g. %vs or %vms", data, data, data)
	}
	return data, nil
}

// rejectLooseBool refuses a number or an empty string where a bool is
// expected: the decoder would take YAML "listen: 2" as true and
// MAILSVC_RELAY_LISTEN="" as false, whatever the default, where
// MAILSVC_RELAY_LISTEN=2 is already an error (strconv.ParseBool's words
// stay: true, false, 1, 0, t, f, in any case).
func rejectLooseBool(from, to reflect.Type, data any) (any, error) {
	if to.Kind() != reflect.Bool {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("%v is not true or false", data)
	case reflect.String:
		if data == "" {
			return nil, errors.New("empty: write true or false (unset the variable for the default)")
		}
	}
	return data, nil
}

// splitTrimmedList splits a string into a list at commas, each item
// trimmed of surrounding spaces: MAILSVC_AMQP_BINDING_KEYS="order.confirmed,
// order.cancelled" binds "order.cancelled", not " order.cancelled", which
// no routing key matches. An empty string is the empty list.
func splitTrimmedList(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice {
		return data, nil
	}
	raw, _ := data.(string)
	if raw == "" {
		return []string{}, nil
	}
	items := strings.Split(raw, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items, nil
}

// rejectEmptyNumber refuses an empty string where a number is expected:
// the decoder would take MAILSVC_MAIL_RECIPIENT_LIMIT="" as 0, which for
// some keys means off, whatever the default.
func rejectEmptyNumber(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if to != durationType && from.Kind() == reflect.String && data == "" {
			return nil, errors.New("empty: write a number (unset the variable for the default)")
		}
	}
	return data, nil
}

func mergeFile(v *viper.Viper, path string) error {
	f := viper.New()
	f.SetConfigFile(path)
	f.SetConfigType("yaml")
	if err := f.ReadInConfig(); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var errs []error
	keys := f.AllKeys() // from a map: sorted, so the errors come in one order
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := defaults[k]; !ok {
			errs = append(errs, fmt.Errorf("%s: unknown key (config file %s)", k, path))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return v.MergeConfigMap(f.AllSettings())
}

func (c *Config) readSecretFiles() error {
	var errs []error
	read := func(key, file string, dst *Secret) {
		if file == "" {
			return
		}
		b, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			return
		}
		c.warnReadableByAll(key, file)
		*dst = Secret(strings.TrimRight(string(b), "\r\n"))
	}
	read("smtp.password_file", c.SMTP.PasswordFile, &c.SMTP.Password)
	read("resend.api_key_file", c.Resend.APIKeyFile, &c.Resend.APIKey)
	read("webhooks.resend_secret_file", c.Webhooks.ResendSecretFile, &c.Webhooks.ResendSecret)
	read("bounces.secret_file", c.Bounces.SecretFile, &c.Bounces.Secret)
	if err := c.Console.CheckSessionSecretSources(); err != nil {
		errs = append(errs, err)
	} else {
		read("console.session_secret_file", c.Console.SessionSecretFile, &c.Console.SessionSecret)
	}
	return errors.Join(errs...)
}

// warnReadableByAll adds a warning when the secret file that key names can
// be read by every user of the machine. A warning, not a refusal: a
// Kubernetes secret volume mounts its files 0644 unless the pod sets
// defaultMode, and some platforms mount them in ways mailsvc cannot change.
func (c *Config) warnReadableByAll(key, file string) {
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return
	}
	c.warnings = append(c.warnings, fmt.Sprintf("%s: %s is readable by every user (mode %04o): chmod 600 it, "+
		"or set defaultMode: 0400 on the Kubernetes secret volume", key, file, fi.Mode().Perm()))
}

// Warnings are what Load noticed that is allowed but unsafe, one line each,
// each naming its key: config check prints them and serve logs them.
func (c *Config) Warnings() []string { return slices.Clone(c.warnings) }
