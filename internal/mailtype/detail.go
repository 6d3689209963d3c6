package mailtype

import "errors"

// ProviderDetail is what the provider said about a failed send, in its own
// terms, so that a consumer of EmailFailed can tell a bad address from an
// outage without parsing the error text. Only the fields of the provider
// that answered are set; a send that got no answer (a broken connection, a
// timeout) has none. Every field is omitted from JSON when unset.
type ProviderDetail struct {
	// SMTPCode is the three-digit reply code (RFC 5321, section 4.2) of the
	// SMTP reply that decided the outcome: 4xx transient, 5xx permanent.
	// 0 when no SMTP reply decided it.
	SMTPCode int `json:"smtp_code,omitempty"`
	// SMTPEnhancedCode is the enhanced status code (RFC 3463) that prefaces
	// the text of that reply (RFC 2034), "class.subject.detail" as in
	// "5.1.1" (bad destination mailbox address) or "4.7.1"; "" when the
	// reply had none, or one that does not match RFC 3463's syntax or
	// disagrees with the class of the reply code.
	SMTPEnhancedCode string `json:"smtp_enhanced_code,omitempty"`
	// HTTPStatus is the HTTP status of the Resend API's answer (Resend API
	// reference, "Errors"); 0 when no response came.
	HTTPStatus int `json:"http_status,omitempty"`
	// ErrorName is the "name" of the Resend API's error body (Resend API
	// reference, "Errors"), e.g. "validation_error", "invalid_api_key",
	// "rate_limit_exceeded"; "" when the body had none (or one that is not
	// a short snake_case identifier).
	ErrorName string `json:"error_name,omitempty"`
}

// IsZero reports whether no field of d is set.
func (d ProviderDetail) IsZero() bool { return d == ProviderDetail{} }

// DetailOf returns the provider detail of err: the Detail of the first
// *Error in its chain that has one (an outer *Error that reclassifies a
// provider's error keeps the provider's detail), or the zero value.
func DetailOf(err error) ProviderDetail {
	var e *Error
	for errors.As(err, &e) {
		if !e.Detail.IsZero() {
			return e.Detail
		}
		err = e.Err
	}
	return ProviderDetail{}
}
