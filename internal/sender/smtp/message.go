package smtp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/mail"
	"strings"

	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// buildMsg renders m as a MIME message whose bytes are the same on every
// attempt: multipart/alternative (text, then HTML) with a boundary derived
// from the stored mail (see boundary), quoted-printable bodies (7-bit, lines
// of at most 76 characters, so servers without 8BITMIME take it), RFC 2047
// encoded subject and display names, the stored Message-ID and the stored
// Date, no User-Agent. An unusable address is a permanent error; the display name
// never is (it is expected cleaned, see sender.Message.ToName).
func buildMsg(m *sender.Message, idempotencyHeader string) (*gomail.Msg, error) {
	msg := gomail.NewMsg(gomail.WithBoundary(boundary(m)), gomail.WithNoDefaultUserAgent(),
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

// boundary is the MIME boundary of m: "mailsvc-" and 24 lowercase hex
// digits, which occurs in neither part (RFC 2046 §5.1.1: the boundary must
// not occur in the encapsulated parts). It is derived from a SHA-256 over
// the dedupe key, text and HTML, a pure function of the stored mail, so
// every attempt's bytes are identical. The dedupe key alone is not enough:
// whoever publishes the event knows it, and an item name holding "--" and
// the boundary where a soft line break puts it at a line start splits the
// message and cuts its text part. A candidate that occurs in the text or the
// HTML is passed over for the next (see freeBoundary).
//
// Checking the raw content suffices. The boundary's bytes (the letters of
// "mailsvc", '-', 0-9, a-f) are printable ASCII other than '=', which
// quoted-printable copies unchanged; all it adds are soft line breaks
// "=\r\n", escapes "=XX" with uppercase hex digits and CRLF line breaks. An
// occurrence in an encoded part holds no '=', CR or LF, so it could take an
// escape's hex digit only as its first byte, which is 'm': it is a run of
// copied bytes with nothing added between them, an occurrence in the raw
// content. The part headers go-mail writes (Content-Type,
// Content-Transfer-Encoding) hold no boundary either.
func boundary(m *sender.Message) string {
	return freeBoundary(contentSum(m.DedupeKey, m.Text, m.HTML), m.Text, m.HTML)
}

// contentSum is a SHA-256 over fields, each after its length (8 bytes, big
// endian), so that no bytes can move from one field to the next unnoticed.
func contentSum(fields ...string) [sha256.Size]byte {
	h := sha256.New()
	_, _ = io.WriteString(h, "boundary:")
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		_, _ = h.Write(n[:])
		_, _ = io.WriteString(h, f)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// freeBoundary is the first of sum's candidates (counter 0, 1, ...) that
// occurs in none of parts. Each one passed over occurs in parts, which hold
// fewer distinct 32-byte strings than bytes, so the loop ends (candidates
// being distinct, short of a 96-bit collision).
func freeBoundary(sum [sha256.Size]byte, parts ...string) string {
	for i := uint64(0); ; i++ {
		b := candidate(sum, i)
		if !containsAny(parts, b) {
			return b
		}
	}
}

// candidate is boundary number i of sum: "mailsvc-" and the hex of the first
// 12 bytes of a SHA-256 over sum and i (8 bytes, big endian).
func candidate(sum [sha256.Size]byte, i uint64) string {
	var in [sha256.Size + 8]byte
	copy(in[:], sum[:])
	binary.BigEndian.PutUint64(in[sha256.Size:], i)
	c := sha256.Sum256(in[:])
	return "mailsvc-" + hex.EncodeToString(c[:12])
}

// containsAny reports whether s occurs in one of parts.
func containsAny(parts []string, s string) bool {
	for _, p := range parts {
		if strings.Contains(p, s) {
			return true
		}
	}
	return false
}
