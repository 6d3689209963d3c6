package templates

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/currency"
	"golang.org/x/text/number"
)

// TestIntegersAreGroupedAsXTextGroupsThem holds the fast path of integer
// (groupDigits) to what x/text prints, byte for byte, for locales that
// group by threes with ASCII digits and for those that do not (Indian
// grouping, native digits), which must fall back to x/text.
func TestIntegersAreGroupedAsXTextGroupsThem(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	wantSep := map[string]string{"vi": ".", "en": ",", "de": ".", "fr": "\u00a0", "ja": ",", "hi": "", "en-IN": "", "ar": "", "bn": ""}
	for locale, sep := range wantSep {
		f, err := newLocaleFormat(locale)
		require.NoError(t, err)
		require.Equal(t, sep, f.groupSep, "%s: the separator learnt from x/text", locale)
		values := append([]int64{}, groupProbes...)
		for range 2000 {
			values = append(values, rng.Int64N(int64(1)<<rng.IntN(63)))
		}
		values = append(values, 1<<63-1, -1, -1234567)
		for _, n := range values {
			require.Equal(t, f.printer.Sprint(number.Decimal(n)), f.integer(n), "%s: %d (seed %d)", locale, n, seed)
		}
	}
}

// TestCurrencySymbolsAreCachedAsPrinted holds the symbol cache to the
// printer's own symbol, on first use and from the cache.
func TestCurrencySymbolsAreCachedAsPrinted(t *testing.T) {
	for _, locale := range []string{"vi", "en"} {
		f, err := newLocaleFormat(locale)
		require.NoError(t, err)
		for _, code := range []string{"VND", "USD", "EUR", "JPY", "BHD", "GBP"} {
			cur := currency.MustParseISO(code)
			want := f.printer.Sprint(currency.Symbol(cur))
			require.Equal(t, want, f.symbol(cur), "%s %s, first use", locale, code)
			require.Equal(t, want, f.symbol(cur), "%s %s, from the cache", locale, code)
		}
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1.000", 123456: "123.456", 1234567: "1.234.567",
		1<<63 - 1: "9.223.372.036.854.775.807"} {
		require.Equal(t, want, groupDigits(n, "."), "%d", n)
	}
	require.Equal(t, "12\u00a0345", groupDigits(12345, "\u00a0"), "a multi-byte separator")
}

// TestAmountsInNativeDigitLocales holds an amount of a locale that writes
// its own digits (a locale added with templates.dir) to one script: the
// decimal separator learnt without the locale's digits around it, and the
// minor units in the locale's digits, as x/text prints the major part.
// Before, ar printed 1234567.89 US$ as "١٬٢٣٤٬٥٦٧١٥٫٠89 US$".
func TestAmountsInNativeDigitLocales(t *testing.T) {
	for locale, want := range map[string]string{
		"ar": "١٬٢٣٤٬٥٦٧٫٨٩ US$",
		"bn": "১২,৩৪,৫৬৭.৮৯ US$",
		"en": "$1,234,567.89",
		"vi": "1.234.567,89 US$",
	} {
		f, err := newLocaleFormat(locale)
		require.NoError(t, err)
		got, err := f.money(money{minor: big.NewInt(123456789), cur: currency.USD, scale: 2})
		require.NoError(t, err)
		require.Equal(t, want, got, locale)
	}
}
