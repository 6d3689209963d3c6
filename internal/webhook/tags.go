package webhook

import (
	"encoding/json"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// resendTags is data.tags of a Resend webhook: the tags the mail was sent
// with, as the object {"name": "value"} that Resend's webhook payloads
// carry ("after the email is sent, the tag is included in the webhook
// event": https://resend.com/docs/dashboard/emails/tags; the payload
// shape: https://resend.com/docs/webhooks/emails/sent). The send
// request's form, a list of {"name", "value"} objects, is taken too.
// Anything else is taken as no tags: a tag only helps to name the mail,
// and a malformed one must not lose the report.
type resendTags map[string]string

// UnmarshalJSON decodes either form; it never fails.
func (t *resendTags) UnmarshalJSON(b []byte) error {
	var obj map[string]string
	if err := json.Unmarshal(b, &obj); err == nil {
		*t = obj
		return nil
	}
	var list []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(b, &list); err == nil {
		m := make(resendTags, len(list))
		for _, e := range list {
			m[e.Name] = e.Value
		}
		*t = m
	}
	return nil
}

// maxTagValue bounds a tag value mailsvc reads: its report tags are at
// most 44 characters (mailtype.ReportTag).
const maxTagValue = 64

// reportTag returns the value of the mailtype.ReportTagName tag, "" when
// there is none or it is longer than maxTagValue.
func (t resendTags) reportTag() string {
	v := t[mailtype.ReportTagName]
	if len(v) > maxTagValue {
		return ""
	}
	return v
}
