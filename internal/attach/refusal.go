package attach

import "fmt"

// Reason is why a fetch failed: a closed set, the label of
// mailsvc_attachment_fetch_failures_total and the reason on the
// attachment's row (docs/design.md, "Attachments", the table of refusals).
type Reason string

// The reasons.
const (
	ReasonScheme      Reason = "scheme"       // not https, or user info in the URL
	ReasonHost        Reason = "host"         // host not on attachments.allowed_hosts (a redirect's too)
	ReasonAddress     Reason = "address"      // resolved to a loopback, private, link-local or unspecified address
	ReasonRedirect    Reason = "redirect"     // too many redirects
	ReasonStatus      Reason = "status"       // an HTTP status other than 200
	ReasonTooLarge    Reason = "too_large"    // more bytes than announced (or Content-Length says so)
	ReasonSize        Reason = "size"         // fewer bytes than announced
	ReasonContentType Reason = "content_type" // the response's type, or the bytes' own, is not the announced one
	ReasonChecksum    Reason = "checksum"     // SHA-256 differs
	ReasonTimeout     Reason = "timeout"      // attachments.timeout ran out
	ReasonSlow        Reason = "slow"         // under attachments.min_rate over a progress window
	ReasonNetwork     Reason = "network"      // connection, TLS or read error
	ReasonExpired     Reason = "expired"      // still failing when the event's max age ran out
)

// Reasons is every Reason, for metrics pre-initialised at zero.
var Reasons = []Reason{ReasonScheme, ReasonHost, ReasonAddress, ReasonRedirect, ReasonStatus, ReasonTooLarge,
	ReasonSize, ReasonContentType, ReasonChecksum, ReasonTimeout, ReasonSlow, ReasonNetwork, ReasonExpired}

// Refusal is a failed fetch: its reason, whether trying again may help
// (Transient) and a detail for the mail and the feedback.
type Refusal struct {
	Reason    Reason
	Transient bool
	Detail    string
}

func (r *Refusal) Error() string { return string(r.Reason) + ": " + r.Detail }

func refuse(reason Reason, transient bool, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Transient: transient, Detail: fmt.Sprintf(format, args...)}
}
