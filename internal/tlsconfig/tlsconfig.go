// Package tlsconfig builds the client TLS configurations mailsvc uses
// towards private infrastructure — its SMTP relay, RabbitMQ and
// PostgreSQL — from PEM files named in the config: a CA bundle that
// verifies the server, a client certificate and its key, and a server-name
// override. It is the one place where those files are read and checked
// (internal/config calls it at start) and where a failed handshake is
// explained in terms of the key to fix (Explain, used by sender/smtp,
// broker and store).
//
// Rules: TLS 1.2 is the oldest version accepted (RFC 8996 deprecates 1.0
// and 1.1); verification is never skipped; every error names the config
// key it is about; no error and no report carries key material (a key
// file's errors say what is wrong with it, never what is in it).
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// MinVersion is the oldest TLS version mailsvc speaks.
const MinVersion = tls.VersionTLS12

// Keys names where each part of a Source is configured, for messages:
// config keys such as "smtp.tls_ca_file", or a parameter of a URL such as
// "sslrootcert in database.url".
type Keys struct {
	CA, Cert, Key, ServerName string
}

// KeysOf returns the keys of a config section that has the four TLS keys
// section.tls_ca_file, .tls_cert_file, .tls_key_file and .tls_server_name
// (smtp, amqp).
func KeysOf(section string) Keys {
	return Keys{CA: section + ".tls_ca_file", Cert: section + ".tls_cert_file",
		Key: section + ".tls_key_file", ServerName: section + ".tls_server_name"}
}

// DatabaseKeys name the libpq TLS parameters of database.url in messages
// (pgx reads those files itself, from the URL).
var DatabaseKeys = Keys{CA: "database.url (sslrootcert)", Cert: "database.url (sslcert)",
	Key: "database.url (sslkey)", ServerName: "database.url (host)"}

// Source names the files of one TLS client. Empty fields are unset.
type Source struct {
	Keys Keys
	// CAFile is a PEM bundle of the CAs that may sign the server's
	// certificate; unset means the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate (PEM, leaf first,
	// then any intermediates) and its unencrypted private key (PEM:
	// PKCS#1, PKCS#8 or SEC 1); both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must be valid for
	// (and the SNI sent); unset means the host dialled.
	ServerName string
}

// IsZero reports whether s sets nothing.
func (s Source) IsZero() bool {
	return s.CAFile == "" && s.CertFile == "" && s.KeyFile == "" && s.ServerName == ""
}

// Cert describes one certificate read from a file, for `config check`
// and the start-up log.
type Cert struct {
	// Key is the config key the file was named by; File its path.
	Key, File string
	// Subject and Issuer are distinguished names (RFC 2253 form).
	Subject, Issuer     string
	NotBefore, NotAfter time.Time
}

// Client reads the files of s and returns a client configuration: TLS 1.2
// or newer, RootCAs from CAFile (nil, meaning the system roots, when
// unset), the client certificate, and ServerName (empty when unset: the
// caller's library then uses the host it dials). It also returns every
// certificate it read. Errors, one per offending key (errors.Join), say
// which key and file: unreadable, no PEM certificate in it, a certificate
// that does not parse, a cert without its key or a key without its cert,
// a key that does not match the certificate, a client certificate that
// has expired or is not valid yet at now.
func Client(s Source, now time.Time) (*tls.Config, []Cert, error) {
	c := &tls.Config{MinVersion: MinVersion, ServerName: s.ServerName}
	var certs []Cert
	var errs []error
	if s.CAFile != "" {
		pool, cs, err := ReadCAs(s.Keys.CA, s.CAFile)
		if err != nil {
			errs = append(errs, err)
		}
		c.RootCAs, certs = pool, append(certs, cs...)
	}
	switch {
	case s.CertFile != "" && s.KeyFile == "":
		errs = append(errs, fmt.Errorf("%s: is required with %s (the client certificate's private key)", s.Keys.Key, s.Keys.Cert))
	case s.CertFile == "" && s.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s: is required with %s (the certificate of that key)", s.Keys.Cert, s.Keys.Key))
	case s.CertFile != "":
		pair, cs, err := ReadKeyPair(s.Keys, s.CertFile, s.KeyFile, now)
		if err != nil {
			errs = append(errs, err)
		} else {
			c.Certificates = []tls.Certificate{pair}
		}
		certs = append(certs, cs...)
	}
	if n := s.ServerName; n != "" && net.ParseIP(n) == nil && strings.ContainsAny(n, " \t/:@") {
		errs = append(errs, fmt.Errorf("%s: %q is not a host name (no port, no scheme)", s.Keys.ServerName, n))
	}
	if len(errs) > 0 {
		return nil, certs, errors.Join(errs...)
	}
	return c, certs, nil
}

// ReadCAs reads a PEM bundle of CA certificates named by key: a pool of
// them, and their descriptions. A file without any certificate, or with
// one that does not parse, is an error naming key and file.
func ReadCAs(key, file string) (*x509.CertPool, []Cert, error) {
	parsed, certs, err := ReadCerts(key, file)
	if err != nil {
		return nil, certs, err
	}
	pool := x509.NewCertPool()
	for _, c := range parsed {
		pool.AddCert(c)
	}
	return pool, certs, nil
}

// ReadCerts reads every certificate of a PEM file named by key. Blocks of
// other types are skipped; a private key block is an error (the wrong
// file, and it must not travel where certificates go).
func ReadCerts(key, file string) ([]*x509.Certificate, []Cert, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", key, err)
	}
	return parseCerts(key, file, b)
}

func parseCerts(key, file string, b []byte) ([]*x509.Certificate, []Cert, error) {
	var parsed []*x509.Certificate
	var certs []Cert
	for i := 1; ; {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, nil, fmt.Errorf("%s: %s holds a private key where certificates are expected: name the key file in its own key", key, file)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: certificate %d: %w", key, file, i, err)
		}
		i++
		parsed = append(parsed, c)
		certs = append(certs, Describe(key, file, c))
	}
	if len(parsed) == 0 {
		return nil, nil, fmt.Errorf("%s: %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", key, file)
	}
	return parsed, certs, nil
}

// ReadKeyPair reads a client certificate and its key, named by k.Cert and
// k.Key. The key must match the certificate's public key, and the
// certificate (the first of the file) must be valid at now.
func ReadKeyPair(k Keys, certFile, keyFile string, now time.Time) (tls.Certificate, []Cert, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%s: %w", k.Cert, err)
	}
	parsed, certs, err := parseCerts(k.Cert, certFile, certPEM)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf := parsed[0]
	if now.After(leaf.NotAfter) {
		return tls.Certificate{}, certs, fmt.Errorf("%s: %s expired at %s: the server will refuse it", k.Cert, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return tls.Certificate{}, certs, fmt.Errorf("%s: %s is not valid before %s (check this machine's clock)", k.Cert, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, certs, fmt.Errorf("%s: %w", k.Key, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, certs, keyPairError(k, certFile, keyFile, err)
	}
	return pair, certs, nil
}

// keyPairError turns tls.X509KeyPair's error (fixed texts that never
// quote the key) into one that names the key file's config key.
func keyPairError(k Keys, certFile, keyFile string, err error) error {
	switch msg := err.Error(); {
	case strings.Contains(msg, "does not match"):
		return fmt.Errorf("%s: %s is not the private key of %s (%s)", k.Key, keyFile, k.Cert, certFile)
	case strings.Contains(msg, "failed to find") || strings.Contains(msg, "rather than a key"):
		return fmt.Errorf("%s: %s holds no PEM private key (-----BEGIN PRIVATE KEY-----; an encrypted key is not supported)", k.Key, keyFile)
	default:
		return fmt.Errorf("%s: %s: %w", k.Key, keyFile, err)
	}
}

// Describe describes c, read from file named by key.
func Describe(key, file string, c *x509.Certificate) Cert {
	return Cert{Key: key, File: file, Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		NotBefore: c.NotBefore, NotAfter: c.NotAfter}
}
