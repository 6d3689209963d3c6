package mailtype

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// No address survives, whatever its form, and nothing that steers a
// terminal or reorders text does.
func TestSanitizeHidesEveryAddressForm(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"550 5.1.1 <Bob@example.com> unknown":       "550 5.1.1 <<address>> unknown",
		`mailbox "bob"@example.com is gone`:         "mailbox <address> is gone",
		"bob(comment)@example.com is gone":          "<address> is gone",
		"bob%40example.com and BOB%40EXAMPLE.COM":   "<address> and <address>",
		"red \x1b[31mALERT\x1b[0m done":             "red ALERT done",
		"evil\u202egnp.exe and \u2066isolate\u2069": "evil gnp.exe and  isolate ",
		"c1\u0085control\x7f and tab\there":         "c1 control  and tab here",
		"key s3cret in text":                        "key <redacted> in text",
	} {
		require.Equal(t, want, Sanitize(in, "s3cret"), in)
	}
}
