package bounce

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVerpRoundTripAndForgeries(t *testing.T) {
	t.Parallel()
	v := Verp{LocalPart: "bounces", Domain: "bounce.shop.example", Secret: []byte("s3cret")}
	addr := v.Address(42)
	require.Regexp(t, `^bounces\+[0-9a-v]{29}@bounce\.shop\.example$`, addr)
	require.Equal(t, addr, v.Address(42), "the same on every attempt")
	for _, form := range []string{addr, "<" + addr + ">", strings.ToUpper(addr)} {
		id, err := v.Parse(form)
		require.NoError(t, err, form)
		require.Equal(t, int64(42), id)
	}
	other := Verp{LocalPart: "bounces", Domain: "bounce.shop.example", Secret: []byte("another")}
	_, err := v.Parse(other.Address(42))
	require.ErrorIs(t, err, ErrBadToken, "another secret's token")
	tok := strings.TrimSuffix(strings.TrimPrefix(addr, "bounces+"), "@bounce.shop.example")
	flipped := []byte(tok)
	flipped[3] ^= 1
	for _, bad := range []string{"bounces+" + string(flipped) + "@bounce.shop.example", "bounces+@bounce.shop.example",
		"bounces+!!@bounce.shop.example", "bounces+" + tok[:20] + "@bounce.shop.example"} {
		_, err := v.Parse(bad)
		require.ErrorIs(t, err, ErrBadToken, bad)
	}
	for _, foreign := range []string{"victim@example.com", "bounces+" + tok + "@example.com", "postmaster+" + tok + "@bounce.shop.example",
		"bounces@bounce.shop.example", "no-at-sign"} {
		_, err := v.Parse(foreign)
		require.ErrorIs(t, err, ErrNotOurs, foreign)
	}
	require.Empty(t, Verp{}.Address(1), "off")
}
