package resendtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// request is the part of a POST /emails body the stand-in reads.
type request struct {
	From    string            `json:"from"`
	To      []string          `json:"to"`
	Subject string            `json:"subject"`
	Headers map[string]string `json:"headers"`
	Tags    []tag             `json:"tags"`
	// Attachments are the request's files (attachments.go).
	Attachments []attachment `json:"attachments"`
}

// tag is one entry of the request's tags: {"name": ..., "value": ...}.
type tag struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// MaxTags is how many tags one email may carry ("Managing Tags": "You can
// add up to 75 tags per email").
const MaxTags = 75

// tagChars is the alphabet of tag names and values ("Managing Tags":
// "Tags can include ASCII letters, numbers, underscores, or dashes").
var tagChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tagMap checks r's tags as Resend documents them and returns them by
// name; nil for none.
func (r request) tagMap() (map[string]string, error) {
	if len(r.Tags) == 0 {
		return nil, nil
	}
	if len(r.Tags) > MaxTags {
		return nil, fmt.Errorf("at most %d tags per email", MaxTags)
	}
	out := make(map[string]string, len(r.Tags))
	for _, t := range r.Tags {
		if !tagChars.MatchString(t.Name) || !tagChars.MatchString(t.Value) {
			return nil, errors.New("tags: names and values can only contain ASCII letters, numbers, underscores or dashes")
		}
		out[t.Name] = t.Value
	}
	return out, nil
}

// Event returns the body of the webhook Resend sends about e, one of the
// mails the stand-in sent: {"type": typ, "created_at": at, "data":
// {"email_id", "from", "to", "subject", "created_at", "tags", ...extra}},
// with the mail's tags as the object {"name": "value"} (Resend's webhook
// pages, e.g. https://resend.com/docs/webhooks/emails/sent), and each of
// extra's keys (bounce, failed, suppressed) added to data. Resend's times
// have milliseconds. The caller signs it (Svix) and posts it.
func Event(typ string, e Email, at time.Time, extra map[string]any) []byte {
	data := map[string]any{
		"email_id": e.ID, "from": e.From, "to": e.To, "subject": e.Subject,
		"created_at": at.Add(-time.Second).UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano),
	}
	if len(e.Tags) > 0 {
		data["tags"] = e.Tags
	}
	for k, v := range extra {
		data[k] = v
	}
	b, err := json.Marshal(map[string]any{"type": typ, "created_at": at.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano), "data": data})
	if err != nil {
		panic(err) // maps of strings and of the caller's JSON values
	}
	return b
}
