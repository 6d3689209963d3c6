package templates

import (
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Display limits, in runes (Unicode code points) after cleaning. A longer
// value is cut on a character boundary and ends with "…"; the mail still
// goes. They keep a hostile or mistaken 10,000-character value from
// breaking a header or the layout.
const (
	// MaxNameRunes bounds the customer name in the greeting and in the To
	// display name (Rendered.ToName).
	MaxNameRunes = 64
	// MaxOrderIDRunes bounds the order id shown in the subject and body.
	MaxOrderIDRunes = 64
	// MaxItemNameRunes bounds an item name.
	MaxItemNameRunes = 200
	// MaxSKURunes bounds an item SKU.
	MaxSKURunes = 64
	// MaxEmailBytes is the longest recipient address accepted (RFC 5321
	// path limit, 256 bytes less the angle brackets).
	MaxEmailBytes = 254
)

// isLineBreak reports whether r ends a line for some mail or text software:
// CR, LF, VT, FF, NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR.
func isLineBreak(r rune) bool {
	switch r {
	case '\r', '\n', '\v', '\f', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}

// isBidiControl reports whether r is an explicit bidi embedding, override or
// isolate (U+202A..U+202E, U+2066..U+2069): such a character in a name could
// reverse the text around it ("Trojan source"). The marks LRM and RLM
// (U+200E, U+200F) only steer neutral characters and are kept, as real
// right-to-left names need them.
func isBidiControl(r rune) bool {
	return (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069')
}

// isControl reports whether r is a C0 or C1 control character or DEL.
func isControl(r rune) bool { return unicode.IsControl(r) }

// hasLineBreak reports whether s contains a line break.
func hasLineBreak(s string) bool {
	return strings.IndexFunc(s, isLineBreak) >= 0
}

// clean makes a value from the event safe and tidy to show: invalid UTF-8
// becomes U+FFFD, text is NFC-normalised (a decomposed "ễ" shows as one
// letter), bidi embeddings and overrides are dropped, control characters
// (line breaks included) become spaces, runs of white space become one
// space, the ends are trimmed, and the result is cut to max runes with
// truncate. Escaping is not its job: html/template escapes every value.
func clean(s string, max int) string {
	s = norm.NFC.String(strings.ToValidUTF8(s, "\uFFFD"))
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case isBidiControl(r):
			continue
		case unicode.IsControl(r) || isLineBreak(r) || unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return truncate(b.String(), max)
}

// truncate cuts s to at most max runes, the last being "…", without
// splitting a letter from its combining marks or an emoji sequence (joined
// by ZWJ, or followed by a variation selector or skin tone).
func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	runes := []rune(s)
	cut := max - 1
	for cut > 0 && (continuesCluster(runes[cut]) || runes[cut-1] == '\u200D') {
		cut--
	}
	return strings.TrimRightFunc(string(runes[:cut]), unicode.IsSpace) + "…"
}

// continuesCluster reports whether r belongs to the character before it.
func continuesCluster(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc) ||
		r == '\u200D' || (r >= '\uFE00' && r <= '\uFE0F') ||
		(r >= 0x1F3FB && r <= 0x1F3FF) || (r >= 0xE0020 && r <= 0xE007F)
}

// DisplayName returns name cleaned for the display name of a To header: no
// control characters, at most MaxNameRunes runes. A name carrying a line
// break is refused (ReasonInvalidField) rather than mended, since it can
// only come from a bug or an attack on the header. The result still needs
// RFC 2047 encoding by the mail library. Render puts it in Rendered.ToName.
func DisplayName(name string) (string, error) {
	if hasLineBreak(name) {
		return "", invalidField("customer_name contains a line break")
	}
	return clean(name, MaxNameRunes), nil
}

// checkEmail validates the recipient address and returns it: a bare
// addr-spec ("b@example.com", no display name, no surrounding space) that
// net/mail parses, at most MaxEmailBytes bytes, with no control character.
// The address itself is not echoed in the error.
func checkEmail(s string) (string, error) {
	if s == "" {
		return "", missingField("email is empty")
	}
	if len(s) > MaxEmailBytes {
		return "", invalidAddress(fmt.Sprintf("email is %d bytes, over %d", len(s), MaxEmailBytes))
	}
	if strings.ContainsFunc(s, isControl) || hasLineBreak(s) {
		return "", invalidAddress("email contains a line break or control character")
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", invalidAddress("email is not an RFC 5322 address")
	}
	if a.Name != "" || a.Address != s {
		return "", invalidAddress("email must be a bare address without a display name")
	}
	return a.Address, nil
}
