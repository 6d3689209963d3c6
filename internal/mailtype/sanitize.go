package mailtype

import (
	"regexp"
	"strings"
)

// MaxErrorText is the longest sanitized error text kept, in bytes.
const MaxErrorText = 500

var addressLike = regexp.MustCompile(`[^\s<>"'(),;:]+@[^\s<>"'(),;:]+`)

// Sanitize makes an error text safe to store in last_error, put in a
// dead-letter header or a feedback event: e-mail addresses become
// "<address>", every secret given is replaced by "<redacted>", control
// characters (CR, LF included) become spaces, and the result is cut to
// MaxErrorText bytes on a rune boundary.
func Sanitize(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
		}
	}
	msg = addressLike.ReplaceAllString(msg, "<address>")
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
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
