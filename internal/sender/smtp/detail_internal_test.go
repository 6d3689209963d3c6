package smtp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnhancedCode: the enhanced status code is read only where RFC 2034
// puts it (first in the reply text, followed by a space or the end), only
// in RFC 3463's syntax, and only when its class agrees with the reply code.
func TestEnhancedCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		code int
		text string
		want string
	}{
		{"bad mailbox", 550, "5.1.1 <x> User unknown", "5.1.1"},
		{"transient policy", 451, "4.7.1 Try again later", "4.7.1"},
		{"success class", 250, "2.0.0 Ok: queued as 4F2", "2.0.0"},
		{"code alone", 550, "5.1.1", "5.1.1"},
		{"three-digit subject and detail", 554, "5.999.999 local policy", "5.999.999"},
		{"unregistered subject is still RFC 3463 syntax", 550, "5.999.1 x", "5.999.1"},
		{"leading spaces", 550, "   5.1.1 User unknown", "5.1.1"},
		{"leading tab", 550, "\t5.1.1 User unknown", "5.1.1"},
		{"tab after", 550, "5.1.1\tUser unknown", "5.1.1"},
		{"multi-line text", 550, "5.1.1 first line\n5.1.1 second line", "5.1.1"},
		{"missing", 550, "User unknown", ""},
		{"empty", 550, "", ""},
		{"only spaces", 550, "   ", ""},
		{"four parts", 550, "5.1.1.1 x", ""},
		{"four-digit subject", 550, "5.1000.1 x", ""},
		{"four-digit detail", 550, "5.1.1000 x", ""},
		{"empty subject", 550, "5..1 x", ""},
		{"empty detail", 550, "5.1. x", ""},
		{"two parts", 550, "5.1 x", ""},
		{"class disagrees with the reply", 550, "4.1.1 x", ""},
		{"class 3 does not exist", 354, "3.0.0 go ahead", ""},
		{"two-digit class", 550, "55.1.1 x", ""},
		{"not a digit", 550, "5.a.1 x", ""},
		{"non-ASCII digits", 550, "5.١.1 x", ""},
		{"glued to the text", 550, "5.1.1,User unknown", ""},
		{"glued to a bracket", 550, "5.1.1<x> User unknown", ""},
		{"not first in the text", 550, "User unknown 5.1.1", ""},
		{"an IP address in the text", 554, "Rejected from 192.5.1.10", ""},
		{"sign", 550, "+5.1.1 x", ""},
		{"negative reply code", -550, "5.1.1 x", ""},
		{"out-of-range reply code", 5550, "5.1.1 x", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, enhancedCode(c.code, c.text))
		})
	}
}
