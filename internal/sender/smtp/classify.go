package smtp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// classifySend classifies a failed transaction from transact's txError:
// its step says which phase failed, its code the SMTP reply code (0 when no
// reply came: the connection broke or the deadline cut it). Rules
// (docs/design.md, "Error classes"):
//   - a reply code: 4xx (421 and 450/451/452 included) is transient, 5xx
//     permanent, in any phase; a 4xx may say more (replyMeaning: the
//     relay's rate limit or quota, greylisting, a 421 closing the
//     channel);
//   - no reply after the whole message was written (the final dot's
//     reply) is ambiguous: the server may have taken the mail;
//   - no reply in any earlier phase (MAIL, RCPT, DATA command, writing the
//     content before the final dot) is transient: the server cannot have
//     taken a mail whose data did not end;
//   - no reply at all is the relay's trouble as well (an outage);
//   - a message without a usable envelope address is permanent.
func classifySend(ctx context.Context, err error) error {
	var te *txError
	if !errors.As(err, &te) {
		return mailtype.NewError(mailtype.Transient, noReplyReason(ctx), err)
	}
	switch {
	case te.step == stepEnvelope:
		return mailtype.NewError(mailtype.Permanent, mailtype.ReasonInvalidAddress, err)
	case te.code == 0 && te.step == stepDot:
		return outage(mailtype.NewError(mailtype.Ambiguous, noReplyReason(ctx), err))
	case te.code == 0:
		return outage(mailtype.NewError(mailtype.Transient, noReplyReason(ctx), err))
	}
	e := byReplyCode(te.code, sendDetail(te), err)
	e.Reroutable = beforeData(te.step, te.code)
	if te.code < 500 {
		return replyMeaning(e, te.step, te.code, te.text)
	}
	return e
}

// outage marks e as a failure any mail would meet while the relay is down
// or going away (sender.TroubleOutage): no reply, a broken connection.
func outage(e *mailtype.Error) error {
	return &sender.ProviderError{Trouble: sender.TroubleOutage, Err: e}
}

// beforeData reports whether a reply refused a transaction before any of
// the message's data was sent, and not because of its recipient: any reply
// to MAIL FROM or to the DATA command, a 4xx to RCPT TO. Another provider
// may take such a mail (sender.fallback_provider); a 5xx to RCPT TO refuses
// the recipient, which is the mail's own verdict.
func beforeData(s step, code int) bool {
	switch s {
	case stepMail, stepData:
		return true
	case stepRcpt:
		return code < 500
	}
	return false
}

// byReplyCode classifies an SMTP reply code: 4xx transient (deferred), 5xx
// permanent (rejected). The error carries the reply's detail.
func byReplyCode(code int, detail mailtype.ProviderDetail, err error) *mailtype.Error {
	e := mailtype.NewError(mailtype.Transient, mailtype.ReasonDeferred, err)
	if code >= 500 && code < 600 {
		e = mailtype.NewError(mailtype.Permanent, mailtype.ReasonRejected, err)
	}
	e.Detail = detail
	return e
}

// noReplyReason says why no reply came: the deadline, or a broken
// connection.
func noReplyReason(ctx context.Context) mailtype.Reason {
	if ctx.Err() != nil {
		return mailtype.ReasonTimeout
	}
	return mailtype.ReasonConnect
}

// tlsKeys are the config keys a certificate failure points to.
var tlsKeys = tlsconfig.KeysOf("smtp")

// dialError classifies a failure while connecting (connect, TLS, greeting,
// EHLO, STARTTLS, AUTH). Nothing of a mail was sent yet, so it is always
// transient, whatever the reply code (a 421 or 554 greeting, a 535 AUTH):
// the mail is retried with backoff until attempts run out. A refusal's
// reply code and enhanced status code are kept as the error's detail: they
// are what an EmailFailed reports once the attempts ran out. A certificate
// failure, in whichever phase it surfaces (under TLS 1.3 a server's refusal
// of the client certificate arrives with the greeting or the EHLO after
// STARTTLS), is reason tls with a hint naming the smtp.tls_* key to fix
// (tlsconfig.Explain): a configuration failure, which no retry cures.
// Another provider may take the mail (Reroutable).
func dialError(ctx context.Context, reason mailtype.Reason, phase string, err error) *mailtype.Error {
	var explained *tlsconfig.Explained
	var ne net.Error
	if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		// A dial under ctx's deadline can return its i/o timeout a moment
		// before ctx itself reports the deadline.
		reason = mailtype.ReasonTimeout
	} else if err = tlsconfig.Explain(err, tlsKeys); errors.As(err, &explained) {
		reason = mailtype.ReasonTLS
	}
	e := mailtype.NewError(mailtype.Transient, reason, fmt.Errorf("%s: %w", phase, err))
	e.Detail = replyDetail(err)
	e.Reroutable = true
	return e
}

// configError marks e as a failure of the configuration or of the
// server's reachability that every mail would meet (the breaker counts
// it): a refused connection, a host name that does not resolve, a
// certificate that does not verify, STARTTLS required but not offered,
// authentication refused or impossible.
func configError(e *mailtype.Error) error {
	return &sender.ProviderError{Trouble: sender.TroubleConfig, Err: e}
}

// unreachable reports a refused connection or a host name that does not
// resolve (smtp.host, smtp.port).
func unreachable(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}

// badCertificate reports a server certificate that does not verify
// (unknown authority, wrong host name, expired).
func badCertificate(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}
