package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Explained is a failed TLS handshake with a hint that names the config
// key to fix. Error is the original text followed by the hint in
// parentheses; Unwrap gives the original error.
type Explained struct {
	Err  error
	Hint string
}

func (e *Explained) Error() string { return e.Err.Error() + " (" + e.Hint + ")" }

// Unwrap returns the original error.
func (e *Explained) Unwrap() error { return e.Err }

// remoteRefusals are the TLS alerts (RFC 8446 section 6.2) a server sends
// when it refuses the client's certificate, as crypto/tls words them
// ("remote error: tls: ..."; the alert type is not exported).
var remoteRefusals = []string{"bad certificate", "unknown certificate authority", "unsupported certificate",
	"certificate revoked", "certificate expired", "certificate unknown", "access denied"}

// Explain recognises a certificate or TLS failure in err's chain and
// returns it as an *Explained naming the key of k to look at; any other
// error (nil included) comes back unchanged, and so does one already
// explained. Test for the outcome with errors.As. It recognises:
//   - the server's certificate not signed by a trusted CA (k.CA),
//     not valid for the name checked (k.ServerName), expired or not yet
//     valid, or otherwise invalid;
//   - the server asking for a client certificate and none was sent
//     (k.Cert, k.Key: crypto/tls sends none that is not signed by a CA
//     the server names), or refusing the one sent, or ending the
//     handshake without saying why;
//   - a server that does not speak TLS on that port, or no common version.
func Explain(err error, k Keys) error {
	var ee *Explained
	if err == nil || errors.As(err, &ee) {
		return err
	}
	if h := hint(err, k); h != "" {
		return &Explained{Err: err, Hint: h}
	}
	return err
}

func hint(err error, k Keys) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("the server's certificate is not signed by a CA of %s, or of the system roots when that is unset", k.CA)
	case errors.As(err, &host):
		return fmt.Sprintf("the server's certificate is not valid for %q: set %s to a name it is valid for, or fix the server's certificate", host.Host, k.ServerName)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "the server's certificate has expired or is not valid yet: renew it on the server (or check this machine's clock)"
	case errors.As(err, &invalid) || errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate does not verify against %s", k.CA)
	case strings.Contains(msg, "remote error: tls: certificate required"):
		// crypto/tls sends no certificate when the one configured is not
		// signed by a CA the server names as acceptable.
		return fmt.Sprintf("the server requires a client certificate signed by a CA it trusts: set %s and %s to one", k.Cert, k.Key)
	case remoteRefusal(msg):
		return fmt.Sprintf("the server refused the client certificate of %s: it must be signed by a CA the server trusts and be valid now", k.Cert)
	case strings.Contains(msg, "remote error: tls: handshake failure"):
		return fmt.Sprintf("the server ended the handshake: it may require a client certificate (%s, %s) or a TLS setting mailsvc does not offer (1.2 or newer)", k.Cert, k.Key)
	case strings.Contains(msg, "remote error: tls: protocol version not supported"):
		return "the server offers no TLS version mailsvc accepts (1.2 or newer)"
	case errors.As(err, &record):
		return "the server does not speak TLS on this port: check the port and the TLS mode"
	}
	return ""
}

func remoteRefusal(msg string) bool {
	for _, r := range remoteRefusals {
		if strings.Contains(msg, "remote error: tls: "+r) {
			return true
		}
	}
	return false
}
