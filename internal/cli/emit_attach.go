package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// sampleAttachment is one element of data.attachments (docs/contract.md,
// "Attachments").
type sampleAttachment struct {
	FileName    string `json:"file_name"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	Size        int    `json:"size"`
}

// readAttachment reads --attach-file, when --attach-url is given, into
// o.attachment: its SHA-256, size and type (by extension).
func (o *emitOptions) readAttachment() error {
	if o.attachURL == "" && o.attachFile == "" && o.attachName == "" {
		return nil
	}
	if o.kind != mailtype.OrderConfirmed || o.attachURL == "" || o.attachFile == "" {
		return &ExitError{Code: ExitInvalid, Err: errors.New("--attach-url and --attach-file go together, with order-confirmed")}
	}
	b, err := os.ReadFile(o.attachFile)
	if err != nil {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--attach-file: %w", err)}
	}
	ctype, _, _ := strings.Cut(mime.TypeByExtension(filepath.Ext(o.attachFile)), ";")
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	name := o.attachName
	if name == "" {
		name = filepath.Base(o.attachFile)
	}
	sum := sha256.Sum256(b)
	o.attachment = &sampleAttachment{FileName: name, ContentType: ctype, URL: o.attachURL,
		SHA256: hex.EncodeToString(sum[:]), Size: len(b)}
	return nil
}
