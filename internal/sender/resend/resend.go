// Package resend is the Resend HTTP API provider of the sender pool, on
// github.com/resend/resend-go/v2 (the only package that imports it). Every
// attempt of a mail sends the same payload with the same Idempotency-Key
// HTTP header (the dedupe key, hashed when longer than 256 characters), so
// Resend sends it at most once within 24 h: a lost response is retried
// safely. The key never appears as a mail header. Outcomes are classified
// from the HTTP status and Resend's error name, read where the response is
// born (a RoundTripper), since resend-go reduces most errors to text.
package resend

import (
	"context"
	"fmt"
	"net/http"
	"net/mail"
	"strings"
	"time"

	resendapi "github.com/resend/resend-go/v2"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// IdempotencyWindow is how long Resend keeps an idempotency key (Resend
// documentation, "Idempotency Keys": 24 hours).
const IdempotencyWindow = 24 * time.Hour

// DefaultBaseURL is the root of Resend's API (resend.base_url's default;
// Resend API reference, "Introduction").
const DefaultBaseURL = "https://api.resend.com/"

// Config configures the Resend provider.
type Config struct {
	// APIKey is the Resend API key (secret).
	APIKey mailtype.Secret
	// BaseURL is the API root; "" means DefaultBaseURL.
	BaseURL string
	// Transport, when set, replaces http.DefaultTransport (tests).
	Transport http.RoundTripper
}

// Provider sends mails through the Resend API. Safe for concurrent use.
type Provider struct {
	api *resendapi.Client
	key string
}

// New returns a Provider; it does not call the API.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("resend.api_key: is required")
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	// No client timeout: the caller's context deadline covers the call.
	api := resendapi.NewCustomClient(&http.Client{Transport: &recorder{next: rt}}, cfg.APIKey.Reveal())
	u, err := api.BaseURL.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("resend.base_url: %q is not an http(s) URL", cfg.BaseURL)
	}
	api.BaseURL = u
	return &Provider{api: api, key: cfg.APIKey.Reveal()}, nil
}

// Name returns "resend".
func (p *Provider) Name() string { return "resend" }

// IdempotencyWindow returns 24 h.
func (p *Provider) IdempotencyWindow() time.Duration { return IdempotencyWindow }

// NewSession returns a session; sessions share the provider's HTTP
// connection pool.
func (p *Provider) NewSession() sender.Session { return session{p: p} }

type session struct{ p *Provider }

func (session) Close() error { return nil }

// Send posts m to /emails with its Idempotency-Key under ctx's deadline.
func (s session) Send(ctx context.Context, m *sender.Message) (sender.Receipt, error) {
	info := &exchange{}
	ctx = withExchange(ctx, info)
	resp, err := s.p.api.Emails.SendWithOptions(ctx, payload(m), &resendapi.SendEmailOptions{IdempotencyKey: m.IdempotencyKey})
	if err == nil {
		return sender.Receipt{ProviderMessageID: resp.Id}, nil
	}
	return sender.Receipt{}, classify(ctx, info, mailtype.Sanitize(err.Error(), s.p.key))
}

// payload is the request body: the same bytes on every attempt of a mail.
func payload(m *sender.Message) *resendapi.SendEmailRequest {
	to := m.To
	switch {
	case m.ToName == "":
	case strings.ContainsAny(m.ToName, "\"(),:;<>@[\\]\r\n"):
		to = (&mail.Address{Name: m.ToName, Address: m.To}).String() // RFC 2047 encoded
	default:
		to = m.ToName + " <" + m.To + ">"
	}
	return &resendapi.SendEmailRequest{
		From: m.From, To: []string{to}, Subject: m.Subject, Text: m.Text, Html: m.HTML, ReplyTo: m.ReplyTo,
		// Only the stored Message-ID (which Resend's email id and our row
		// both map to); the idempotency key travels as the HTTP header only.
		Headers:     map[string]string{"Message-ID": m.MessageID},
		Tags:        reportTags(m),
		Attachments: attachments(m),
	}
}

// attachments are m's stored files as Resend's `attachments` field:
// content (base64 in the JSON), filename and content_type (Resend API
// reference, "Send Email"; docs "Attachments"). The same bytes on every
// attempt, so a retry's payload is identical and its Idempotency-Key
// holds.
func attachments(m *sender.Message) []*resendapi.Attachment {
	if len(m.Attachments) == 0 {
		return nil
	}
	out := make([]*resendapi.Attachment, len(m.Attachments))
	for i, a := range m.Attachments {
		out[i] = &resendapi.Attachment{Content: a.Content, Filename: a.FileName, ContentType: a.ContentType}
	}
	return out
}

// reportTags are the tags of m's request: its report tag
// (mailtype.ReportTagName), which Resend's webhooks carry back in
// data.tags, so that a report names the mail even when its email id
// never reached mailsvc (an `unknown` mail, settled by that report). None
// for a mail without a stored idempotency key or id (rows older than the
// envelope columns): no report could be checked against it.
func reportTags(m *sender.Message) []resendapi.Tag {
	if m.ID <= 0 || m.IdempotencyKey == "" {
		return nil
	}
	return []resendapi.Tag{{Name: mailtype.ReportTagName, Value: mailtype.ReportTag(m.ID, m.IdempotencyKey)}}
}
