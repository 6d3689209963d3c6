package templates

import (
	"fmt"
	"math/big"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/currency"
)

// maxAmountLen is the longest decimal string accepted for an amount, in
// bytes; it bounds the work spent on hostile input.
const maxAmountLen = 40

// money is an exact amount in minor units of a currency (VND has none, so
// its minor unit is the dong itself; USD has cents). No float is ever used:
// parsing, line totals and sums are integer arithmetic on big.Int.
type money struct {
	minor *big.Int
	cur   currency.Unit
	// scale is the number of minor digits of cur (ISO 4217 via CLDR: VND 0,
	// USD 2, BHD 3).
	scale int
}

// parseCurrency returns the currency of an ISO 4217 code (case-insensitive)
// and its number of minor digits.
func parseCurrency(code string) (currency.Unit, int, error) {
	if len(code) != 3 {
		return currency.Unit{}, 0, fmt.Errorf("currency: want a 3-letter ISO 4217 code, got %d bytes", len(code))
	}
	u, err := currency.ParseISO(code)
	if err != nil {
		return currency.Unit{}, 0, fmt.Errorf("currency: unknown ISO 4217 code %q", code)
	}
	scale, _ := currency.Standard.Rounding(u)
	return u, scale, nil
}

// parseAmount parses a non-negative decimal string in major units ("12.50",
// "1250000") into minor units of a currency with scale minor digits.
// Rejected: empty, sign, exponent, grouping, spaces, more than maxAmountLen
// bytes, and more fraction digits than the currency has unless they are
// zeros ("1250000.00" VND is accepted, "1250000.5" VND is not).
func parseAmount(s string, scale int) (*big.Int, error) {
	if s == "" || len(s) > maxAmountLen {
		return nil, fmt.Errorf("malformed amount: want a decimal string of 1 to %d bytes", maxAmountLen)
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(intPart) || (hasDot && !allDigits(frac)) {
		return nil, fmt.Errorf("malformed amount %q: want digits with an optional '.' fraction", quoteShort(s))
	}
	if len(frac) > scale {
		if strings.Trim(frac[scale:], "0") != "" {
			return nil, fmt.Errorf("malformed amount %q: more than %d decimal places for this currency", quoteShort(s), scale)
		}
		frac = frac[:scale]
	}
	frac += strings.Repeat("0", scale-len(frac))
	n, ok := new(big.Int).SetString(intPart+frac, 10)
	if !ok {
		return nil, fmt.Errorf("malformed amount %q", quoteShort(s))
	}
	return n, nil
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// quoteShort returns s cut to 40 bytes on a rune boundary, for messages.
func quoteShort(s string) string {
	if len(s) <= maxAmountLen {
		return s
	}
	cut := maxAmountLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// split returns the major part of m and its minor digits as a string of
// exactly m.scale digits ("" when the currency has none). It fails when the
// major part does not fit an int64 (over 9.2e18 units: never a real order).
func (m money) split() (int64, string, error) {
	div := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(m.scale)), nil)
	major, minor := new(big.Int).QuoRem(m.minor, div, new(big.Int))
	if !major.IsInt64() {
		return 0, "", fmt.Errorf("amount too large: %s minor units", m.minor.String())
	}
	digits := ""
	if m.scale > 0 {
		digits = fmt.Sprintf("%0*s", m.scale, minor.String())
	}
	return major.Int64(), digits, nil
}
