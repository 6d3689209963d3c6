package config_test

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/tlstest"
)

// files is a private CA and a client certificate written as PEM files.
type files struct {
	dir, ca, cert, key string
	leaf               *tlstest.Leaf
}

func tlsFiles(t *testing.T) files {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "Corp Root CA")
	leaf := ca.Client(t, "mailsvc")
	cert, key := leaf.WriteFiles(t, dir, "client")
	return files{dir: dir, ca: ca.WriteFile(t, dir, "ca.pem"), cert: cert, key: key, leaf: leaf}
}

func TestTLSFilesAreReadAtLoad(t *testing.T) {
	t.Parallel()
	f := tlsFiles(t)
	c, err := config.Load("", envOf(with(map[string]string{
		"MAILSVC_SMTP_TLS_CA_FILE": f.ca, "MAILSVC_SMTP_TLS_CERT_FILE": f.cert, "MAILSVC_SMTP_TLS_KEY_FILE": f.key,
		"MAILSVC_SMTP_TLS_SERVER_NAME": "relay.internal",
		"MAILSVC_AMQP_URL":             "amqps://u:p@mq.internal:5671/", "MAILSVC_AMQP_TLS_CA_FILE": f.ca,
		"MAILSVC_DATABASE_URL": "postgres://mailsvc@db.internal/mailsvc?sslmode=verify-full&sslrootcert=" + f.ca +
			"&sslcert=" + f.cert + "&sslkey=" + f.key,
	})))
	require.NoError(t, err)
	s := c.SMTPTLS()
	require.NotNil(t, s)
	require.Equal(t, "relay.internal", s.ServerName)
	require.Len(t, s.Certificates, 1)
	require.EqualValues(t, tls.VersionTLS12, s.MinVersion)
	s.ServerName = "changed"
	require.Equal(t, "relay.internal", c.SMTPTLS().ServerName, "a copy each time")
	a := c.AMQPTLS()
	require.NotNil(t, a)
	require.Empty(t, a.ServerName, "the URL's host")
	require.Empty(t, a.Certificates)

	var keys []string
	for _, cert := range c.Certificates() {
		keys = append(keys, cert.Key)
	}
	require.Equal(t, []string{"smtp.tls_ca_file", "smtp.tls_cert_file", "amqp.tls_ca_file",
		"database.url (sslrootcert)", "database.url (sslcert)"}, keys)

	out, err := yaml.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(out), "tls_ca_file: "+f.ca)
	require.Contains(t, string(out), "sslrootcert="+f.ca, "config check shows the libpq parameters")
	require.NotContains(t, string(out), strings.Split(string(f.leaf.KeyPEM), "\n")[1], "no key material")

	plain, err := config.Load("", envOf(valid))
	require.NoError(t, err)
	require.Nil(t, plain.SMTPTLS())
	require.Nil(t, plain.AMQPTLS())
	require.Empty(t, plain.Certificates())
}

func TestTLSMisconfigurationNamesTheKey(t *testing.T) {
	t.Parallel()
	f := tlsFiles(t)
	missing := filepath.Join(f.dir, "missing.pem")
	for name, c := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"smtp CA file missing": {map[string]string{"MAILSVC_SMTP_TLS_CA_FILE": missing},
			[]string{"smtp.tls_ca_file: open " + missing}},
		"smtp key without cert": {map[string]string{"MAILSVC_SMTP_TLS_KEY_FILE": f.key},
			[]string{"smtp.tls_cert_file: is required with smtp.tls_key_file"}},
		"smtp files with tls none": {map[string]string{"MAILSVC_SMTP_TLS": "none", "MAILSVC_SMTP_TLS_CA_FILE": f.ca},
			[]string{"smtp.tls_ca_file: is set but smtp.tls is none"}},
		"smtp files with opportunistic": {map[string]string{"MAILSVC_SMTP_TLS": "opportunistic", "MAILSVC_SMTP_TLS_SERVER_NAME": "x"},
			[]string{"smtp.tls_server_name: is set but smtp.tls is opportunistic"}},
		"amqp CA with amqp://": {map[string]string{"MAILSVC_AMQP_TLS_CA_FILE": f.ca},
			[]string{"amqp.tls_ca_file: is set but amqp.url is amqp:// (plaintext)"}},
		"amqp cert with amqp://": {map[string]string{"MAILSVC_AMQP_TLS_CERT_FILE": f.cert, "MAILSVC_AMQP_TLS_KEY_FILE": f.key},
			[]string{"amqp.tls_cert_file: is set but amqp.url is amqp://", "amqp.tls_key_file: is set but amqp.url is amqp://"}},
		"amqp key of another cert": {map[string]string{"MAILSVC_AMQP_URL": "amqps://mq/", "MAILSVC_AMQP_TLS_CERT_FILE": f.cert,
			"MAILSVC_AMQP_TLS_KEY_FILE": tlsFiles(t).key}, []string{"amqp.tls_key_file: ", "is not the private key of amqp.tls_cert_file"}},
		"amqp URL's own TLS parameters": {map[string]string{"MAILSVC_AMQP_URL": "amqps://mq/?cacertfile=" + f.ca},
			[]string{"amqp.url: parameter cacertfile is not used: set amqp.tls_ca_file instead"}},
		"database files without verification": {map[string]string{"MAILSVC_DATABASE_URL": "postgres://u@h/db?sslmode=require&sslrootcert=" + f.ca},
			[]string{`database.url: sets sslrootcert but sslmode is "require", which does not verify the server`}},
		"database default sslmode": {map[string]string{"MAILSVC_DATABASE_URL": "host=h sslcert=" + f.cert + " sslkey=" + f.key},
			[]string{`database.url: sets sslcert but sslmode is "prefer (the default)"`}},
		"database CA missing": {map[string]string{"MAILSVC_DATABASE_URL": "postgres://u@h/db?sslmode=verify-full&sslrootcert=" + missing},
			[]string{"database.url (sslrootcert): open " + missing}},
		"database key without cert": {map[string]string{"MAILSVC_DATABASE_URL": "host=h sslmode=verify-full sslkey='" + f.key + "'"},
			[]string{"database.url: sslcert and sslkey go together"}},
		"database cert as key": {map[string]string{"MAILSVC_DATABASE_URL": "postgres://u@h/db?sslmode=verify-ca&sslcert=" + f.cert + "&sslkey=" + f.cert},
			[]string{"database.url (sslkey): ", "holds no PEM private key"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load("", envOf(with(c.env)))
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), strings.Split(string(f.leaf.KeyPEM), "\n")[1])
		})
	}
}

func TestDatabaseTLSParametersThatNeedNoFile(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://u@h/db?sslmode=verify-full",
		"postgres://u@h/db?sslrootcert=system",
		"host=h sslmode=disable",
		"host=h sslmode=verify-full sslcertmode=disable sslcert=/nope sslkey=/nope",
	} {
		_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_DATABASE_URL": u})))
		require.NoError(t, err, u)
	}
	for u, want := range map[string]string{
		// net/url stops at '#'; the driver reads on, and the last sslmode wins.
		"postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x#eu&sslmode=disable": "contains a '#'",
		"postgres://u@h/db?sslmode=verify-full&sslmode=disable":                                           "parameter sslmode is given twice",
		"postgres://u@h/db?sslmode=verify-full&ssl=true":                                                  "parameter ssl is the driver's alias for sslmode=require",
		"postgres://u@h/db?sslmode=verify-full&sslrootcert=%zz":                                           `parameter "sslrootcert" is not valid percent-encoding`,
	} {
		_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_DATABASE_URL": u})))
		require.ErrorContains(t, err, "database.url: "+want, u)
	}
	// A '+' in a path is a '+' for the driver: the file checked is the one it reads.
	_, err := config.Load("", envOf(with(map[string]string{"MAILSVC_DATABASE_URL": "postgres://u@h/db?sslmode=verify-full&sslrootcert=/no/ca+corp.pem"})))
	require.ErrorContains(t, err, "/no/ca+corp.pem")
	_, err = config.Load("", envOf(with(map[string]string{"MAILSVC_DATABASE_URL": "host=h password='s3cret-open"})))
	require.ErrorContains(t, err, "database.url: password: unterminated quoted value")
	require.NotContains(t, err.Error(), "s3cret-open")
}
