package config

import "github.com/mailsvc/mailsvc/internal/consumer"

// Bounds of mail.max_attachment_bytes. DefaultMaxAttachmentBytes (10 MiB,
// the consumer's, which enforces it)
// is about 13.4 MiB once base64 encoded; the limit (28 MiB, 37.3 MiB
// encoded) keeps a mail with its bodies within Resend's 40 MB per mail
// after base64 (Resend API reference, "Send Email", attachments).
const (
	DefaultMaxAttachmentBytes = consumer.DefaultMaxAttachmentBytes
	MinAttachmentBytes        = 1 << 10
	MaxAttachmentBytesLimit   = 28 << 20
)

// validateAttachments checks mail.max_attachment_bytes and the
// attachments.* keys (attach.Settings.Check).
func (c *Config) validateAttachments(bad func(string, string, ...any)) {
	if n := c.Mail.MaxAttachmentBytes; n < MinAttachmentBytes || n > MaxAttachmentBytesLimit {
		bad("mail.max_attachment_bytes", "must be %d to %d bytes (Resend takes at most 40 MB per mail after base64), got %d",
			MinAttachmentBytes, MaxAttachmentBytesLimit, n)
	}
	c.Attachments.Check(bad)
}
