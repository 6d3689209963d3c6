package operator

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest dedupe key Key accepts, in bytes: the longest
// the store holds in its index (an input event's key is at most 512 bytes,
// docs/contract.md, but each resend appends ":resend:N" to it).
const MaxKeyLen = 2000

// MaxOrderIDLen is the longest order id OrderID accepts, in bytes (the
// input contract's limit, docs/contract.md).
const MaxOrderIDLen = 200

// MaxAddressLen is the longest address Address accepts, in bytes (RFC
// 5321's limit on a path, as the suppression list's).
const MaxAddressLen = 254

// ErrInvalidInput is wrapped by every *InputError.
var ErrInvalidInput = errors.New("invalid input")

// InputError says why what an operator typed or listed cannot be a key
// or an address. It is the input's fault, never the database's: nothing
// was looked up. KindOf gives KindInvalid. It wraps ErrInvalidInput (and
// Err).
type InputError struct {
	// Problem says what is wrong: "not an e-mail address", "not a dedupe
	// key: not valid UTF-8".
	Problem string
	// Input is the text as given (cut when over-long), "" when empty.
	Input string
	// Hint says how to fix it, "" for nothing to add.
	Hint string
	// Err is a sentinel the refusal also wraps (ErrNoReason), or nil.
	Err error
}

func (e *InputError) Error() string {
	msg := e.Problem
	if e.Input != "" {
		msg += fmt.Sprintf(": %q", e.Input)
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg + " (the input's fault: nothing was looked up)"
}

// Unwrap returns ErrInvalidInput, and Err when set.
func (e *InputError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidInput, e.Err}
	}
	return []error{ErrInvalidInput}
}

// Key returns the dedupe key an operator typed or listed, normalised
// (a leading byte-order mark and surrounding white space removed: every
// Unicode space, no-break space included, and zero-width spaces), or an
// *InputError saying why it cannot be a key: not valid UTF-8, empty, a
// control character inside, more than MaxKeyLen bytes. The key's own
// letters are kept as given (keys are compared exactly).
func Key(s string) (string, error) {
	k, err := clean("a dedupe key", s)
	if err != nil {
		return "", err
	}
	if len(k) > MaxKeyLen {
		return "", &InputError{Problem: fmt.Sprintf("not a dedupe key: %d bytes, more than %d (the longest key mailsvc stores)", len(k), MaxKeyLen),
			Input: cut(k)}
	}
	return k, nil
}

// OrderID returns the order id an operator typed, normalised as Key
// does, or an *InputError: not valid UTF-8, empty, a control character,
// more than MaxOrderIDLen bytes.
func OrderID(s string) (string, error) {
	id, err := clean("an order id", s)
	if err != nil {
		return "", err
	}
	if len(id) > MaxOrderIDLen {
		return "", &InputError{Problem: fmt.Sprintf("not an order id: %d bytes, more than %d", len(id), MaxOrderIDLen), Input: cut(id)}
	}
	return id, nil
}

// Address returns the recipient address an operator typed, in the form
// the suppression list stores and compares (store.Suppress: the SQL
// function mailsvc_address_key): surrounding space removed as Key does,
// a display name and angle brackets removed ("Ann <ann@example.com>" and
// "<ann@example.com>" give ann@example.com), the domain's ASCII letters
// lower-cased. The local part keeps its case: RFC 5321 lets a mailbox be
// case-sensitive, so Ann@example.com and ann@example.com may be two
// people, and mailsvc never merges them. It returns an *InputError for
// what is not exactly one address (none, two, a malformed one, white space
// or a control character inside, more than MaxAddressLen bytes).
func Address(s string) (string, error) {
	a, err := clean("an e-mail address", s)
	if err != nil {
		return "", err
	}
	const hint = "give one address, such as ann@example.com or Ann <ann@example.com>"
	parsed, err := mail.ParseAddress(a)
	if err != nil {
		if list, lerr := mail.ParseAddressList(a); lerr == nil && len(list) > 1 {
			return "", &InputError{Problem: fmt.Sprintf("not one e-mail address but %d", len(list)), Input: a, Hint: hint}
		}
		return "", &InputError{Problem: "not an e-mail address", Input: a, Hint: hint}
	}
	addr := parsed.Address
	at := strings.LastIndexByte(addr, '@')
	switch {
	case at <= 0 || at == len(addr)-1:
		return "", &InputError{Problem: "not an e-mail address", Input: a, Hint: hint}
	case strings.ContainsFunc(addr, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "", &InputError{Problem: "not an e-mail address: white space inside it", Input: a, Hint: hint}
	case len(addr) > MaxAddressLen:
		return "", &InputError{Problem: fmt.Sprintf("not an e-mail address: %d bytes, more than %d (RFC 5321)", len(addr), MaxAddressLen),
			Input: cut(a)}
	}
	return addr[:at+1] + lowerASCII(addr[at+1:]), nil
}

// clean is the normalisation Key and Address share: refuse what is not
// UTF-8, drop a leading byte-order mark and the space around, refuse an
// empty result and control characters. what names the expected thing
// with its article.
func clean(what, s string) (string, error) {
	if !utf8.ValidString(s) {
		i := invalidAt(s)
		return "", &InputError{Problem: "not " + what + ": not valid UTF-8", Input: cut(s),
			Hint: fmt.Sprintf("byte 0x%02x at offset %d is not part of a character: check the file's encoding", s[i], i)}
	}
	s = strings.TrimFunc(strings.TrimPrefix(s, "\uFEFF"), isSpace)
	if s == "" {
		return "", &InputError{Problem: "no " + strings.SplitN(what, " ", 2)[1] + " given: empty once the space around it is removed"}
	}
	if i := strings.IndexFunc(s, hidden); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return "", &InputError{Problem: fmt.Sprintf("not %s: control character U+%04X at offset %d", what, r, i), Input: cut(s)}
	}
	return s, nil
}

// Text returns free text an operator typed (an action's reason, an
// actor's name) with the space around it removed, "" for none, or an
// *InputError: not valid UTF-8, or a control character (an escape
// sequence in the audit log would rewrite the terminal that prints it;
// a NUL cannot be stored) or a bidirectional override (it would reorder
// what a reader sees). what names the text in the message.
func Text(what, s string) (string, error) {
	if strings.TrimFunc(s, isSpace) == "" && utf8.ValidString(s) {
		return "", nil
	}
	return clean(what, s)
}

// cut shortens s for a message: its first 64 bytes and "...".
func cut(s string) string {
	if len(s) <= 64 {
		return s
	}
	n := 64
	for n > 0 && utf8.ValidString(s[:n+1]) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// hidden reports whether r changes what a reader sees rather than being
// seen: a control character, or a bidirectional embedding, override or
// isolate (U+202A..U+202E, U+2066..U+2069).
func hidden(r rune) bool {
	return unicode.IsControl(r) || ('\u202A' <= r && r <= '\u202E') || ('\u2066' <= r && r <= '\u2069')
}

// isSpace is white space to trim: every Unicode space (U+00A0 no-break
// space, U+2000..U+200A, U+3000 included), zero-width spaces and the
// byte-order mark.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\u200B' || r == '\u2060' || r == '\uFEFF'
}

// invalidAt is the offset of the first byte of s that is not UTF-8.
func invalidAt(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return 0
}

// lowerASCII lower-cases the ASCII letters of s only, as the store's
// mailsvc_address_key does (an internationalised domain keeps its other
// letters as given).
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}
