package mailtype

import (
	"regexp"
	"strings"
)

// MaxErrorText is the longest sanitized error text kept, in bytes.
const MaxErrorText = 500

// addressLike is anything around an '@' up to white space or angle
// brackets: a plain address, and the forms a plain pattern misses (a
// quoted local part, a comment, a percent-encoded '@' once decoded).
var addressLike = regexp.MustCompile(`[^\s<>]*@[^\s<>]+`)

// percentAt is a percent-encoded '@'.
var percentAt = regexp.MustCompile(`(?i)%40`)

// terminalEscape is an ANSI escape sequence (CSI), removed whole: a
// terminal that shows the text must not be steered by it.
var terminalEscape = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

// Sanitize makes an error text safe to store in last_error, put in a
// dead-letter header or a feedback event: e-mail addresses become
// "<address>" (also quoted, commented or percent-encoded ones), every
// secret given is replaced by "<redacted>", terminal escape sequences are
// removed, control characters (CR, LF and C1 included) and bidirectional
// formatting characters become spaces, and the result is cut to
// MaxErrorText bytes on a rune boundary.
func Sanitize(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
		}
	}
	msg = terminalEscape.ReplaceAllString(msg, "")
	msg = addressLike.ReplaceAllString(percentAt.ReplaceAllString(msg, "@"), "<address>")
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || isBidi(r) {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > MaxErrorText {
		cut := MaxErrorText
		for cut > 0 && !isRuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return msg
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// isBidi reports the characters that reorder text (RFC 8264's bidi
// controls): marks, embeddings, overrides and isolates.
func isBidi(r rune) bool {
	return r == 0x200e || r == 0x200f || r == 0x061c || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
