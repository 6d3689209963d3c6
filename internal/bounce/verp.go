// Package bounce takes in what SMTP tells mailsvc after the 250: delivery
// status notifications (RFC 3464) that relays and recipients' servers send
// to the envelope sender. Every mail goes out with a VERP envelope sender
// (Verp.Address) that names it and carries an HMAC under a configured
// secret, so a report can be matched to its mail and a forged or guessed
// one changes nothing. The bounce listener (Server) accepts mail only for
// that address's domain and only with a valid token, never relays, and
// records each report on its mail (store.RecordWebhook).
package bounce

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"strings"
)

// tokenEncoding writes tokens in lower-case base32 without padding:
// letters and digits only, as every local part may hold, and the same
// whatever case a server folds the address to (it is decoded upper-cased).
var tokenEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// macLen is the bytes of HMAC-SHA256 a token keeps: 80 bits, beyond any
// guessing through an SMTP listener that answers each try.
const macLen = 10

// Verp makes and reads VERP envelope senders: LocalPart+TOKEN@Domain,
// where TOKEN names a mail by its id and authenticates it (HMAC-SHA256
// under Secret, 80 bits kept). The zero value is off: Address returns "".
type Verp struct {
	// LocalPart and Domain are the bounce address's (bounces.address,
	// e.g. bounces@bounce.shop.example): the domain's MX points at the
	// bounce listener.
	LocalPart, Domain string
	// Secret keys the HMAC (bounces.secret); a leaked one lets anyone
	// forge reports, so it is a secret like a password.
	Secret []byte
}

// On reports whether v makes addresses.
func (v Verp) On() bool { return v.Domain != "" && len(v.Secret) > 0 }

// Address is the envelope sender of mail id: "bounces+TOKEN@domain", the
// same on every attempt (invariant 7); "" when v is off.
func (v Verp) Address(id int64) string {
	if !v.On() {
		return ""
	}
	return v.LocalPart + "+" + v.token(id) + "@" + v.Domain
}

func (v Verp) token(id int64) string {
	b := make([]byte, 8, 8+macLen)
	binary.BigEndian.PutUint64(b, uint64(id))
	return strings.ToLower(tokenEncoding.EncodeToString(append(b, v.mac(b)...)))
}

func (v Verp) mac(id []byte) []byte {
	m := hmac.New(sha256.New, v.Secret)
	m.Write([]byte("mailsvc verp v1:"))
	m.Write(id)
	return m.Sum(nil)[:macLen]
}

// Errors of Parse.
var (
	// ErrNotOurs is an address outside the bounce domain or local part:
	// the listener refuses it as a relay attempt.
	ErrNotOurs = errors.New("not an address of the bounce domain")
	// ErrBadToken is an address of the domain whose token does not decode
	// or whose HMAC does not hold: a forged or mangled report.
	ErrBadToken = errors.New("no valid mail token")
)

// Parse returns the mail id that address names. The domain and local
// part compare case-insensitively; the token is checked in constant time.
func (v Verp) Parse(address string) (int64, error) {
	local, domain, ok := strings.Cut(strings.Trim(strings.TrimSpace(address), "<>"), "@")
	if !ok || !v.On() || !strings.EqualFold(domain, v.Domain) {
		return 0, ErrNotOurs
	}
	base, tok, ok := strings.Cut(local, "+")
	if !ok || !strings.EqualFold(base, v.LocalPart) {
		return 0, ErrNotOurs
	}
	raw, err := tokenEncoding.DecodeString(strings.ToUpper(tok))
	if err != nil || len(raw) != 8+macLen || !strings.EqualFold(tokenEncoding.EncodeToString(raw), tok) {
		return 0, ErrBadToken // the last character's spare bits must be zero: one spelling per token
	}
	if !hmac.Equal(raw[8:], v.mac(raw[:8])) {
		return 0, ErrBadToken
	}
	return int64(binary.BigEndian.Uint64(raw[:8])), nil
}
