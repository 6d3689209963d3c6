package operator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/operator"
)

func TestKeyNormalises(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-confirmed:42":                    "order-confirmed:42",
		"\uFEFForder-confirmed:42\r":            "order-confirmed:42",
		" \t order-confirmed:42\u00A0":          "order-confirmed:42",
		"\u2003order-confirmed:42\u200B\u3000":  "order-confirmed:42",
		"Order-Confirmed:42":                    "Order-Confirmed:42",
		strings.Repeat("k", operator.MaxKeyLen): strings.Repeat("k", operator.MaxKeyLen),
	} {
		got, err := operator.Key(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
}

func TestKeyRefusesWhatCannotBeAKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-\xffconfirmed:42": `not a dedupe key: not valid UTF-8: "order-\xffconfirmed:42"; byte 0xff at offset 6 is not part of a character: check the file's encoding (the input's fault: nothing was looked up)`,
		" \u00A0\uFEFF":          `no dedupe key given: empty once the space around it is removed (the input's fault: nothing was looked up)`,
		"":                       `no dedupe key given: empty once the space around it is removed (the input's fault: nothing was looked up)`,
		"order\x07:42":           `not a dedupe key: control character U+0007 at offset 5: "order\a:42" (the input's fault: nothing was looked up)`,
		"a\nb":                   `not a dedupe key: control character U+000A at offset 1: "a\nb" (the input's fault: nothing was looked up)`,
		strings.Repeat("k", operator.MaxKeyLen+1): `not a dedupe key: 2001 bytes, more than 2000 (the longest key mailsvc stores): "` +
			strings.Repeat("k", 64) + `..." (the input's fault: nothing was looked up)`,
	} {
		got, err := operator.Key(in)
		require.Empty(t, got)
		var ie *operator.InputError
		require.ErrorAs(t, err, &ie, "%q", in)
		require.ErrorIs(t, err, operator.ErrInvalidInput)
		require.Equal(t, operator.KindInvalid, operator.KindOf(err))
		require.Equal(t, want, err.Error())
	}
}

func TestAddressNormalises(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ann@example.com":                  "ann@example.com",
		"<ann@example.com>":                "ann@example.com",
		"Ann Smith <ann@example.com>":      "ann@example.com",
		`"Smith, Ann" <ann@example.com>`:   "ann@example.com",
		"ann@example.com\u00A0":            "ann@example.com",
		"\uFEFF ann@EXAMPLE.Com\t":         "ann@example.com",
		"Ann@Example.COM":                  "Ann@example.com", // the local part keeps its case
		"<Ann.Smith+shop@Sub.Example.COM>": "Ann.Smith+shop@sub.example.com",
	} {
		got, err := operator.Address(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
}

func TestAddressRefusesWhatIsNotOneAddress(t *testing.T) {
	t.Parallel()
	const hint = "; give one address, such as ann@example.com or Ann <ann@example.com> (the input's fault: nothing was looked up)"
	for in, want := range map[string]string{
		"not-an-address":                   `not an e-mail address: "not-an-address"` + hint,
		"ann@example.com, bob@example.com": `not one e-mail address but 2: "ann@example.com, bob@example.com"` + hint,
		"<ann@example.com":                 `not an e-mail address: "<ann@example.com"` + hint,
		"ann@":                             `not an e-mail address: "ann@"` + hint,
		"ann\xff@example.com":              `not an e-mail address: not valid UTF-8: "ann\xff@example.com"; byte 0xff at offset 3 is not part of a character: check the file's encoding (the input's fault: nothing was looked up)`,
		"\u00A0":                           `no e-mail address given: empty once the space around it is removed (the input's fault: nothing was looked up)`,
		"ann\x00@example.com":              `not an e-mail address: control character U+0000 at offset 3: "ann\x00@example.com" (the input's fault: nothing was looked up)`,
	} {
		got, err := operator.Address(in)
		require.Empty(t, got)
		require.Equal(t, operator.KindInvalid, operator.KindOf(err), "%q", in)
		require.Equal(t, want, err.Error(), "%q", in)
	}
	long := strings.Repeat("a", 250) + "@example.com"
	_, err := operator.Address(long)
	require.True(t, errors.Is(err, operator.ErrInvalidInput))
	require.ErrorContains(t, err, "262 bytes, more than 254 (RFC 5321)")
}

func TestOrderID(t *testing.T) {
	t.Parallel()
	id, err := operator.OrderID("\uFEFF 42\u00A0")
	require.NoError(t, err)
	require.Equal(t, "42", id)
	_, err = operator.OrderID("4\xff2")
	require.EqualError(t, err, `not an order id: not valid UTF-8: "4\xff2"; byte 0xff at offset 1 is not part of a character: check the file's encoding (the input's fault: nothing was looked up)`)
	_, err = operator.OrderID(strings.Repeat("4", operator.MaxOrderIDLen+1))
	require.ErrorContains(t, err, "not an order id: 201 bytes, more than 200")
	_, err = operator.OrderID(" ")
	require.EqualError(t, err, "no order id given: empty once the space around it is removed (the input's fault: nothing was looked up)")
}
