package resendtest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxEmailBytes is Resend's limit on an email with its attachments after
// base64 encoding ("Attachments": "Max 40MB per email"); the stand-in
// refuses more with 422 validation_error.
const MaxEmailBytes = 40_000_000

// maxBody bounds the request body the stand-in reads (content sent as a
// JSON array of byte values, as the Go SDK does, takes up to 4 bytes a
// byte).
const maxBody = 4*MaxEmailBytes + 1<<20

// Attachment is one attachment of a sent email, decoded.
type Attachment struct {
	Filename    string
	ContentType string
	Content     []byte
}

// attachment is one entry of the request's attachments: content as a
// base64 string (the API reference) or a JSON array of byte values (what
// resend-go sends, a Node Buffer's shape), or a path Resend would fetch.
type attachment struct {
	Content     json.RawMessage `json:"content"`
	Filename    string          `json:"filename"`
	Path        string          `json:"path"`
	ContentType string          `json:"content_type"`
}

// decodeAttachments checks the request's attachments as Resend documents
// them (a filename, content or path, at most MaxEmailBytes after base64
// in total) and returns them decoded.
func decodeAttachments(in []attachment) ([]Attachment, error) {
	var out []Attachment
	total := 0
	for i, a := range in {
		if a.Filename == "" {
			return nil, fmt.Errorf("attachments[%d]: filename is required", i)
		}
		if len(a.Content) == 0 && a.Path == "" {
			return nil, fmt.Errorf("attachments[%d]: content or path is required", i)
		}
		b, err := decodeContent(a.Content)
		if err != nil {
			return nil, fmt.Errorf("attachments[%d]: content: %w", i, err)
		}
		total += base64.StdEncoding.EncodedLen(len(b))
		if total > MaxEmailBytes {
			return nil, fmt.Errorf("attachments exceed %d bytes after base64 encoding", MaxEmailBytes)
		}
		out = append(out, Attachment{Filename: a.Filename, ContentType: a.ContentType, Content: b})
	}
	return out, nil
}

func decodeContent(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return base64.StdEncoding.DecodeString(s)
	}
	var ints []int
	if err := json.Unmarshal(raw, &ints); err != nil {
		return nil, errors.New("neither a base64 string nor an array of bytes")
	}
	b := make([]byte, len(ints))
	for i, v := range ints {
		if v < 0 || v > 255 {
			return nil, errors.New("a value of the array is not a byte")
		}
		b[i] = byte(v)
	}
	return b, nil
}
