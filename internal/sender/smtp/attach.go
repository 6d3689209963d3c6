package smtp

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"

	gomail "github.com/wneessen/go-mail"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// outgoing is the message of one send: the go-mail message (its
// envelope, and its bytes for a mail without attachments) and, for a mail
// with attachments, those bytes wrapped in multipart/mixed (mixed).
type outgoing struct {
	*gomail.Msg
	mixed []byte
}

// WriteTo writes the message's bytes.
func (o outgoing) WriteTo(w io.Writer) (int64, error) {
	if o.mixed == nil {
		return o.Msg.WriteTo(w)
	}
	n, err := w.Write(o.mixed)
	return int64(n), err
}

// withAttachments returns msg ready to send: as it is for a mail without
// attachments; otherwise its bytes wrapped in a multipart/mixed whose
// first part is the mail as go-mail renders it (multipart/alternative,
// text then HTML) and then one base64 part per attachment, named by
// Content-Disposition's filename parameter, RFC 2231 encoded when it is
// not ASCII (mime.FormatMediaType), as is Content-Type's name parameter.
// The outer boundary is derived like the inner one (boundary), from the
// stored mail and the files' SHA-256, so every attempt's bytes are the
// same; it differs from the inner one and occurs in neither body (base64
// has no '-').
func withAttachments(msg *gomail.Msg, m *sender.Message) (outgoing, error) {
	if len(m.Attachments) == 0 {
		return outgoing{Msg: msg}, nil
	}
	var raw bytes.Buffer
	if _, err := msg.WriteTo(&raw); err != nil {
		return outgoing{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonOther, "render the message: %v", err)
	}
	top, inner, body, ok := splitContentFields(raw.Bytes())
	if !ok {
		return outgoing{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonOther, "the rendered message has no header end")
	}
	outer := mixedBoundary(m, boundary(m))
	var out bytes.Buffer
	out.Write(top)
	out.WriteString("Content-Type: " + mime.FormatMediaType("multipart/mixed", map[string]string{"boundary": outer}) + "\r\n\r\n")
	mw := multipart.NewWriter(&out)
	if err := mw.SetBoundary(outer); err != nil {
		return outgoing{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonOther, "boundary: %v", err)
	}
	p, err := mw.CreatePart(inner)
	if err == nil {
		_, err = p.Write(body)
	}
	for i := 0; err == nil && i < len(m.Attachments); i++ {
		err = writeAttachment(mw, m.Attachments[i])
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return outgoing{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonOther, "write the attachments: %v", err)
	}
	return outgoing{Msg: msg, mixed: out.Bytes()}, nil
}

func writeAttachment(mw *multipart.Writer, a sender.Attachment) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", mime.FormatMediaType(a.ContentType, map[string]string{"name": a.FileName}))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.FileName}))
	h.Set("Content-Transfer-Encoding", "base64")
	if h.Get("Content-Type") == "" || h.Get("Content-Disposition") == "" {
		return fmt.Errorf("attachment %q: its type or name cannot be written", mailtype.Sanitize(a.FileName))
	}
	p, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	return writeBase64(p, a.Content)
}

// writeBase64 writes b in base64 lines of 76 characters (RFC 2045 6.8).
func writeBase64(w io.Writer, b []byte) error {
	enc := base64.StdEncoding.EncodeToString(b)
	for len(enc) > 0 {
		n := min(76, len(enc))
		if _, err := io.WriteString(w, enc[:n]+"\r\n"); err != nil {
			return err
		}
		enc = enc[n:]
	}
	return nil
}

// mixedBoundary is the multipart/mixed boundary of m: a candidate over
// the inner boundary and the files' SHA-256 that is not the inner one and
// does not occur in the text or the HTML.
func mixedBoundary(m *sender.Message, inner string) string {
	fields := []string{"mixed", inner}
	for _, a := range m.Attachments {
		s := sha256.Sum256(a.Content)
		fields = append(fields, a.FileName, a.ContentType, string(s[:]))
	}
	return freeBoundary(contentSum(fields...), m.Text, m.HTML, inner)
}

// splitContentFields splits a rendered message into its header without
// the Content-Type and Content-Transfer-Encoding fields (top, ending in
// CRLF, field order kept), those two fields as a part header (inner) and
// the body. ok is false when the header has no end.
func splitContentFields(raw []byte) (top []byte, inner textproto.MIMEHeader, body []byte, ok bool) {
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return nil, nil, nil, false
	}
	inner = textproto.MIMEHeader{}
	var field []string
	flush := func() {
		if len(field) == 0 {
			return
		}
		name, value, _ := strings.Cut(strings.Join(field, "\r\n"), ":")
		switch k := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)); k {
		case "Content-Type", "Content-Transfer-Encoding":
			inner.Set(k, strings.TrimSpace(strings.ReplaceAll(value, "\r\n", "")))
		default:
			top = append(top, strings.Join(field, "\r\n")+"\r\n"...)
		}
		field = nil
	}
	for _, line := range strings.Split(string(head), "\r\n") {
		if line != "" && (line[0] == ' ' || line[0] == '\t') {
			field = append(field, line)
			continue
		}
		flush()
		field = []string{line}
	}
	flush()
	return top, inner, body, true
}
