package mailtype

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// ReportTagName is the name of the tag every mail sent through Resend
// carries (the send request's `tags`), so that Resend's webhooks name the
// mail even when its email id never reached mailsvc (a lost response: an
// `unknown` mail). Resend documents that "after the email is sent, the tag
// is included in the webhook event" and that tags hold ASCII letters,
// numbers, underscores or dashes ("Managing Tags",
// https://resend.com/docs/dashboard/emails/tags); its webhook payloads
// carry them as the object data.tags, {"name": "value"}
// (https://resend.com/docs/webhooks/emails/sent).
const ReportTagName = "mailsvc_mail"

// reportTagDigits is how many hex digits of the digest a tag keeps: 96
// bits, so a mail of another deployment or schema (another idempotency
// namespace, another dedupe key under the same id) never matches.
const reportTagDigits = 24

// ReportTag is the value of the ReportTagName tag of mail id whose stored
// idempotency key (IdempotencyKey) is idempotencyKey: "<id>-<24 hex
// digits of SHA-256 of the key>", at most 44 characters, of the alphabet
// Resend allows. It is the same on every attempt of the mail, so the
// request payload, and its Idempotency-Key hash, do not change. The key
// binds the tag to this deployment's namespace and to the mail's dedupe
// key; it authenticates nothing (the webhook's signature does).
func ReportTag(id int64, idempotencyKey string) string {
	sum := sha256.Sum256([]byte("mailsvc report tag v1:" + idempotencyKey))
	return strconv.FormatInt(id, 10) + "-" + hex.EncodeToString(sum[:])[:reportTagDigits]
}

// ReportTagID returns the mail id a ReportTag value names, and false when
// the value is not of that form. Whether it is that mail's tag is for the
// caller to check, with ReportTag and the mail's stored idempotency key.
func ReportTagID(tag string) (int64, bool) {
	id, digest, ok := strings.Cut(tag, "-")
	if !ok || len(digest) != reportTagDigits || strings.Trim(digest, "0123456789abcdef") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != id {
		return 0, false
	}
	return n, true
}
