package mailtype

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MessageID returns the RFC 5322 Message-ID (with angle brackets) of the
// mail with dedupeKey, sent from an address at domain: the same key always
// gives the same id, so every attempt carries it and mail clients collapse
// a duplicate that the SMTP ambiguity window lets through. The local part
// is the first 32 hex digits of SHA-256(dedupeKey), so no customer data
// leaks into headers. An empty domain gives "mailsvc.invalid".
func MessageID(dedupeKey, domain string) string {
	if domain == "" {
		domain = "mailsvc.invalid"
	}
	sum := sha256.Sum256([]byte(dedupeKey))
	return "<" + hex.EncodeToString(sum[:16]) + "@" + domain + ">"
}

// MaxIdempotencyKey is the longest idempotency key Resend accepts, in
// characters (Resend API reference, "Idempotency Key").
const MaxIdempotencyKey = 256

// IdempotencyKey returns the provider idempotency key of a mail: namespace
// + ":" + dedupeKey (the dedupe key alone when namespace is ""), or
// "sha256:" + the hex SHA-256 of that text when it is longer than
// MaxIdempotencyKey. The namespace is the deployment's
// (mail.idempotency_namespace): Resend replays the first response of a key
// for 24 h to anyone using the same API key, so two deployments sharing an
// account and reusing order ids must never share keys. The key is computed
// once, when the row is written, and stored with it.
func IdempotencyKey(namespace, dedupeKey string) string {
	key := dedupeKey
	if namespace != "" {
		key = namespace + ":" + dedupeKey
	}
	if len(key) <= MaxIdempotencyKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// AddressDomain returns the domain of an address such as
// "Shop <orders@example.com>" or "orders@example.com", or "".
func AddressDomain(addr string) string {
	addr = strings.TrimSpace(addr)
	if i := strings.LastIndexByte(addr, '>'); i >= 0 {
		addr = addr[:i]
	}
	if i := strings.LastIndexByte(addr, '@'); i >= 0 {
		return addr[i+1:]
	}
	return ""
}
