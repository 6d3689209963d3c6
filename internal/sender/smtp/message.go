package smtp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/mail"
	"strings"

	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// buildMsg renders m as a MIME message whose bytes are the same on every
// attempt: multipart/alternative (text, then HTML) with a boundary derived
// from the dedupe key, quoted-printable bodies (7-bit, lines of at most 76
// characters, so servers without 8BITMIME take it), RFC 2047 encoded
// subject and display names, the stored Message-ID and the stored Date, no
// User-Agent. An unusable address is a permanent error; the display name
// never is (it is expected cleaned, see sender.Message.ToName).
func buildMsg(m *sender.Message, idempotencyHeader string) (*gomail.Msg, error) {
	msg := gomail.NewMsg(gomail.WithBoundary(boundary(m.DedupeKey)), gomail.WithNoDefaultUserAgent(),
		gomail.WithEncoding(gomail.EncodingQP), gomail.WithCharset(gomail.CharsetUTF8))
	if err := msg.From(m.From); err != nil {
		return nil, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidAddress, "from address: %v", err)
	}
	to, err := mail.ParseAddress(m.To)
	if err != nil {
		return nil, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidAddress, "recipient address: %s",
			mailtype.Sanitize(err.Error()))
	}
	// The name is set on the parsed address, never parsed itself: any
	// display name (a quote, a trailing backslash) is quoted or RFC 2047
	// encoded by net/mail, so only the address can fail the mail.
	msg.AddToMailAddress(&mail.Address{Name: m.ToName, Address: to.Address})
	if m.ReplyTo != "" {
		if err := msg.ReplyTo(m.ReplyTo); err != nil {
			return nil, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidAddress, "reply-to address: %v", err)
		}
	}
	msg.Subject(m.Subject)
	msg.SetMessageIDWithValue(strings.TrimSuffix(strings.TrimPrefix(m.MessageID, "<"), ">"))
	msg.SetDateWithValue(m.Date.UTC())
	msg.SetGenHeader(sender.DedupeHeader, sender.HeaderKey(m.DedupeKey))
	if idempotencyHeader != "" {
		msg.SetGenHeader(gomail.Header(idempotencyHeader), sender.HeaderKey(m.IdempotencyKey))
	}
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	if m.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	}
	return msg, nil
}

// boundary is the MIME boundary of the mail with dedupeKey: fixed per mail
// so that every attempt's bytes are identical, and long and random-looking
// enough never to occur in quoted-printable content.
func boundary(dedupeKey string) string {
	sum := sha256.Sum256([]byte("boundary:" + dedupeKey))
	return fmt.Sprintf("mailsvc-%s", hex.EncodeToString(sum[:12]))
}
