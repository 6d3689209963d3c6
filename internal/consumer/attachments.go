package consumer

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Attachment limits of the contract (docs/contract.md, "Attachments").
const (
	// MaxAttachments is the most files one event may attach.
	MaxAttachments = 10
	// MaxFileNameBytes bounds a file name, in UTF-8 bytes (the usual file
	// system limit).
	MaxFileNameBytes = 255
	// MaxAttachmentURLBytes bounds an attachment URL, in bytes (pre-signed
	// object-store URLs run to about 1,500).
	MaxAttachmentURLBytes = 2048
	// MaxAttachmentSize is the largest size the contract allows for one
	// file, in bytes (25 MiB); mail.max_attachment_bytes bounds a mail's
	// total further.
	MaxAttachmentSize = 25 << 20
	// DefaultMaxAttachmentBytes is mail.max_attachment_bytes' default: the
	// most bytes of attachments one mail may carry in total (10 MiB, about
	// 13.4 MiB once base64 encoded, well within Resend's 40 MB per mail).
	DefaultMaxAttachmentBytes = 10 << 20
)

// AttachmentRules is what the Decider needs to judge data.attachments.
type AttachmentRules struct {
	// Enabled is false when the deployment fetches no attachment
	// (attachments.allowed_hosts empty): an event with attachments is
	// then refused (invalid_field) rather than sent without them.
	Enabled bool
	// MaxBytes is mail.max_attachment_bytes, the most bytes of
	// attachments in one mail; 0 means DefaultMaxAttachmentBytes.
	MaxBytes int64
}

// attachmentData is one element of data.attachments. Pointer fields tell
// absent from zero.
type attachmentData struct {
	FileName    *string `json:"file_name"`
	ContentType *string `json:"content_type"`
	URL         *string `json:"url"`
	SHA256      *string `json:"sha256"`
	Size        *int64  `json:"size"`
	Optional    *bool   `json:"optional"`
}

var (
	mediaTypeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}$`)
	sha256RE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// checkAttachments validates data.attachments (docs/contract.md,
// "Attachments"): at most MaxAttachments, each with a safe file name, a
// media type, an https URL, a SHA-256 and a size, the sizes within
// rules.MaxBytes in total. Refusals are invalid_field or missing_field.
func checkAttachments(list []attachmentData, rules AttachmentRules) *mailtype.Error {
	if len(list) == 0 {
		return nil
	}
	if !rules.Enabled {
		return permanent(mailtype.ReasonInvalidField, "data.attachments: this deployment fetches no attachment (attachments.allowed_hosts is empty)")
	}
	if len(list) > MaxAttachments {
		return permanent(mailtype.ReasonInvalidField, "data.attachments has %d files, more than %d", len(list), MaxAttachments)
	}
	limit := rules.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxAttachmentBytes
	}
	var total int64
	for i, a := range list {
		field := fmt.Sprintf("data.attachments[%d]", i)
		if err := checkAttachment(field, &a); err != nil {
			return err
		}
		total += *a.Size
	}
	if total > limit {
		return permanent(mailtype.ReasonInvalidField, "data.attachments total %d bytes, more than mail.max_attachment_bytes (%d)", total, limit)
	}
	return nil
}

func checkAttachment(field string, a *attachmentData) *mailtype.Error {
	names := []string{"file_name", "content_type", "url", "sha256"}
	for i, v := range []*string{a.FileName, a.ContentType, a.URL, a.SHA256} {
		if v == nil || *v == "" {
			return permanent(mailtype.ReasonMissingField, "%s.%s is required", field, names[i])
		}
	}
	if a.Size == nil {
		return permanent(mailtype.ReasonMissingField, "%s.size is required", field)
	}
	if err := CheckFileName(*a.FileName); err != nil {
		return permanent(mailtype.ReasonInvalidField, "%s.file_name %s", field, err)
	}
	if !mediaTypeRE.MatchString(*a.ContentType) {
		return permanent(mailtype.ReasonInvalidField, "%s.content_type %q is not a media type type/subtype without parameters", field, mailtype.Sanitize(*a.ContentType))
	}
	if err := checkAttachmentURL(*a.URL); err != nil {
		return permanent(mailtype.ReasonInvalidField, "%s.url %s", field, err)
	}
	if !sha256RE.MatchString(*a.SHA256) {
		return permanent(mailtype.ReasonInvalidField, "%s.sha256 is not 64 lower-case hexadecimal digits", field)
	}
	if *a.Size < 1 || *a.Size > MaxAttachmentSize {
		return permanent(mailtype.ReasonInvalidField, "%s.size %d is not 1 to %d bytes", field, *a.Size, MaxAttachmentSize)
	}
	return nil
}

// CheckFileName returns a description of what makes name unusable as an
// attachment's file name, nil when it is fine: 1 to MaxFileNameBytes
// bytes of UTF-8, no path separator (/ or \), no control character (C0,
// DEL, C1, U+2028, U+2029), no bidirectional or invisible formatting
// character (U+200B–U+200F, U+202A–U+202E, U+2060–U+2069, U+FEFF: a
// right-to-left override shows "invoice\u202Efdp.exe" as
// "invoiceexe.pdf"), not blank, not "." or "..".
func CheckFileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is empty")
	case len(name) > MaxFileNameBytes:
		return fmt.Errorf("is %d bytes, more than %d", len(name), MaxFileNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("is not UTF-8")
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("%q contains a path separator (/ or \\)", mailtype.Sanitize(name))
	case strings.IndexFunc(name, isFileNameControl) >= 0:
		return fmt.Errorf("contains a control character")
	case strings.IndexFunc(name, isFileNameFormat) >= 0:
		return fmt.Errorf("contains a bidirectional or invisible formatting character (U+200B-U+200F, U+202A-U+202E, U+2060-U+2069, U+FEFF)")
	case strings.TrimFunc(name, unicode.IsSpace) == "":
		return fmt.Errorf("is blank")
	case name == "." || name == "..":
		return fmt.Errorf("is . or .., a path rather than a file name")
	}
	return nil
}

func isFileNameControl(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == '\u2028' || r == '\u2029'
}

// isFileNameFormat reports the formatting characters a file name must not
// carry: they change how the name reads, not what it is.
func isFileNameFormat(r rune) bool {
	return (r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2060 && r <= 0x2069) || r == 0xfeff
}

// checkAttachmentURL refuses what is not an absolute https URL with a
// host, no user info, at most MaxAttachmentURLBytes. Where it may point
// (the allow-list, no private address) is the fetcher's to check.
func checkAttachmentURL(raw string) error {
	if len(raw) > MaxAttachmentURLBytes {
		return fmt.Errorf("is %d bytes, more than %d", len(raw), MaxAttachmentURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("is not a URL")
	}
	if u.Scheme != "https" {
		return fmt.Errorf("is not an https URL (scheme %q)", mailtype.Sanitize(u.Scheme))
	}
	if u.Hostname() == "" || u.User != nil || u.Opaque != "" {
		return fmt.Errorf("must be https://host/... without user info")
	}
	return nil
}
