// Package tlstest is test support for TLS to private infrastructure: a
// private CA made in memory with crypto/x509, server and client
// certificates it signs, written as PEM files into a test's temporary
// directory (no key is ever committed), a TLS-terminating proxy that
// requires a client certificate (Terminator), a plain TCP forwarder that
// records what a client sent (Recorder), and a PostgreSQL with ssl=on in its
// own data directory and port (StartPostgres). Import it from tests only
// (.golangci.yml, depguard).
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a private certificate authority that lives for one test.
type CA struct {
	// Cert is the CA's self-signed certificate.
	Cert *x509.Certificate
	// PEM is Cert, PEM-encoded.
	PEM []byte
	key *ecdsa.PrivateKey
}

// NewCA makes a CA called name (its subject CN), valid from an hour ago
// for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"mailsvc tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: CA certificate: %v", err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA certificate as PEM into dir and returns its path.
func (ca *CA) WriteFile(t testing.TB, dir, name string) string {
	t.Helper()
	return writeFile(t, dir, name, ca.PEM, 0o644)
}

// Spec describes a certificate to issue.
type Spec struct {
	// CommonName is the subject CN (for PostgreSQL's cert authentication,
	// the role name).
	CommonName string
	// Hosts are the DNS names and IP addresses the certificate is valid for
	// (server certificates).
	Hosts []string
	// Client makes a client certificate (extended key usage clientAuth);
	// otherwise a server certificate (serverAuth).
	Client bool
	// NotBefore and NotAfter bound its validity; zero values mean an hour
	// ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Leaf is a certificate issued by a CA, with its key.
type Leaf struct {
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its PKCS#8 key as PEM.
	CertPEM, KeyPEM []byte
	// TLS is the pair for a tls.Config.
	TLS tls.Certificate
}

// Issue signs a certificate as spec says.
func (ca *CA) Issue(t testing.TB, spec Spec) *Leaf {
	t.Helper()
	key := newKey(t)
	if spec.NotBefore.IsZero() {
		spec.NotBefore = time.Now().Add(-time.Hour)
	}
	if spec.NotAfter.IsZero() {
		spec.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: spec.CommonName},
		NotBefore:    spec.NotBefore,
		NotAfter:     spec.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if spec.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range spec.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("tlstest: issue %s: %v", spec.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: issue %s: %v", spec.CommonName, err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: key of %s: %v", spec.CommonName, err)
	}
	return &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
	}
}

// Server issues a server certificate for hosts (DNS names or IPs).
func (ca *CA) Server(t testing.TB, hosts ...string) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CommonName: hosts[0], Hosts: hosts})
}

// Client issues a client certificate with subject CN cn.
func (ca *CA) Client(t testing.TB, cn string) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CommonName: cn, Client: true})
}

// WriteFiles writes the certificate (0644) and its key (0600) as
// dir/name.crt and dir/name.key and returns both paths.
func (l *Leaf) WriteFiles(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return writeFile(t, dir, name+".crt", l.CertPEM, 0o644), writeFile(t, dir, name+".key", l.KeyPEM, 0o600)
}

// ServerConfig is a server's TLS configuration presenting srv: TLS 1.2 or
// newer, and, when clients is not nil, requiring a client certificate
// signed by it.
func ServerConfig(srv *Leaf, clients *CA) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}
	if clients != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = clients.Pool()
	}
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

func writeFile(t testing.TB, dir, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatalf("tlstest: write %s: %v", p, err)
	}
	return p
}
