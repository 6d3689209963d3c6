package templates

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/currency"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/number"
)

// localeFormat formats numbers, money and dates as a reader of one locale
// expects. It is immutable after newLocaleFormat but for its cache of
// currency symbols, a sync.Map, so safe for concurrent use.
type localeFormat struct {
	printer *message.Printer
	// decimalSep is the locale's decimal separator, learnt from x/text.
	decimalSep string
	// groupSep is the locale's digit-group separator when x/text groups
	// ASCII digits by threes from the right for every integer
	// (groupSeparator): "." in vi, "," in en. integer then groups digits
	// itself, the same bytes without the printer (which took 3 % of serve's
	// CPU while it ingested a backlog; docs/benchmarks.md, "What the rest
	// of the gap to the floor is made of"). "" leaves every
	// number to x/text (Indian grouping, a minimum of two digits before a
	// separator, native digits).
	groupSep string
	// symbols caches the printer's symbol of each currency.Unit (a string).
	symbols sync.Map
	// digits writes ASCII digits in the locale's own ("٠١٢…" in ar), for
	// the minor units, which money writes itself; nil where they are ASCII.
	digits *strings.Replacer
	// symbolAfter puts the currency symbol after the number, as CLDR's
	// currency pattern does for vi ("#,##0.00 ¤"); en puts it before
	// ("¤#,##0.00").
	symbolAfter bool
	// date formats an instant already in the configured zone.
	date func(time.Time) string
}

// newLocaleFormat returns the formats of locale (a lowercase base language
// such as "vi" or "en"). Digit grouping, the decimal separator, currency
// symbols and minor digits come from golang.org/x/text (CLDR). x/text does
// not apply CLDR's per-locale currency patterns (it prints "₫ 1.250.000"
// for every locale), so the symbol position and the date layouts of vi and
// en are kept here; any other locale gets x/text numbers, the symbol after
// the number, and an ISO date.
func newLocaleFormat(locale string) (*localeFormat, error) {
	tag, err := language.Parse(locale)
	if err != nil {
		return nil, fmt.Errorf("locale %q: %w", locale, err)
	}
	p := message.NewPrinter(tag)
	var digits [10]string
	for d := range digits {
		digits[d] = p.Sprint(number.Decimal(d))
	}
	// 15 at scale 1 prints "15,0" in vi, "15.0" in en and "١٥٫٠" in ar: the
	// separator is what stands between the locale's 15 and its 0 (no float
	// is involved).
	sep := strings.TrimSuffix(strings.TrimPrefix(p.Sprint(number.Decimal(15, number.Scale(1))), digits[1]+digits[5]), digits[0])
	f := &localeFormat{printer: p, decimalSep: sep, groupSep: groupSeparator(p), symbolAfter: true, date: dateISO}
	if digits[0] != "0" {
		f.digits = strings.NewReplacer("0", digits[0], "1", digits[1], "2", digits[2], "3", digits[3], "4", digits[4],
			"5", digits[5], "6", digits[6], "7", digits[7], "8", digits[8], "9", digits[9])
	}
	switch locale {
	case "vi":
		f.date = dateVI
	case "en":
		f.symbolAfter, f.date = false, dateEN
	}
	return f, nil
}

// money formats m: "1.250.000 ₫" in vi, "₫1,250,000" in en, "12,50 US$" in
// vi and "$12.50" in en. The space is U+0020 (the HTML keeps amounts on one
// line with white-space:nowrap). It fails only for an amount whose major
// part exceeds an int64.
func (f *localeFormat) money(m money) (string, error) {
	major, digits, err := m.split()
	if err != nil {
		return "", err
	}
	num := f.integer(major)
	if digits != "" {
		if f.digits != nil {
			digits = f.digits.Replace(digits)
		}
		num += f.decimalSep + digits
	}
	sym := f.symbol(m.cur)
	if f.symbolAfter {
		return num + " " + sym, nil
	}
	// CLDR currency spacing: a symbol ending in a letter ("BHD") is kept
	// apart from the digits.
	if r, _ := utf8.DecodeLastRuneInString(sym); unicode.IsLetter(r) {
		return sym + " " + num, nil
	}
	return sym + num, nil
}

// quantity formats an item count with the locale's digit grouping.
func (f *localeFormat) quantity(q int) string {
	return f.integer(int64(q))
}

// integer formats n with the locale's digit grouping, as x/text's
// number.Decimal prints it.
func (f *localeFormat) integer(n int64) string {
	if f.groupSep == "" || n < 0 {
		return f.printer.Sprint(number.Decimal(n))
	}
	return groupDigits(n, f.groupSep)
}

// symbol is the printer's symbol of cur ("₫", "US$", "$"), cached.
func (f *localeFormat) symbol(cur currency.Unit) string {
	if s, ok := f.symbols.Load(cur); ok {
		return s.(string)
	}
	s := f.printer.Sprint(currency.Symbol(cur))
	f.symbols.Store(cur, s)
	return s
}

// groupProbes are the integers groupSeparator checks x/text against: 0 and
// a number of each length from 1 to 19 digits (the longest int64), so a
// rule that depends on the number of digits (a minimum of two digits
// before a separator, Indian grouping) shows.
var groupProbes = func() []int64 {
	const digits = "1234567890123456789"
	out := []int64{0}
	for k := 1; k <= len(digits); k++ {
		n, _ := strconv.ParseInt(digits[:k], 10, 64) // at most 19 digits below MaxInt64
		out = append(out, n)
	}
	return out
}()

// groupSeparator returns the separator x/text's printer p puts between
// groups of three ASCII digits, when it prints every one of groupProbes
// that way (groupDigits), and "" otherwise.
func groupSeparator(p *message.Printer) string {
	got := p.Sprint(number.Decimal(1234))
	if len(got) < 5 || !strings.HasPrefix(got, "1") || !strings.HasSuffix(got, "234") {
		return ""
	}
	sep := got[1 : len(got)-3]
	for _, n := range groupProbes {
		if p.Sprint(number.Decimal(n)) != groupDigits(n, sep) {
			return ""
		}
	}
	return sep
}

// groupDigits writes n (non-negative) in ASCII digits with sep between
// groups of three from the right: groupDigits(1234567, ".") is "1.234.567".
func groupDigits(n int64, sep string) string {
	d := strconv.FormatInt(n, 10)
	if len(d) <= 3 {
		return d
	}
	var b strings.Builder
	b.Grow(len(d) + (len(d)-1)/3*len(sep))
	head := len(d) % 3
	if head == 0 {
		head = 3
	}
	b.WriteString(d[:head])
	for i := head; i < len(d); i += 3 {
		b.WriteString(sep)
		b.WriteString(d[i : i+3])
	}
	return b.String()
}

// dateVI is the Vietnamese day-first date: "18/09/2026 15:00 (GMT+7)".
func dateVI(t time.Time) string {
	return t.Format("02/01/2006 15:04") + " (" + gmtOffset(t) + ")"
}

// dateEN is the English date: "September 18, 2026, 3:00 PM (GMT+7)".
func dateEN(t time.Time) string {
	return t.Format("January 2, 2006, 3:04 PM") + " (" + gmtOffset(t) + ")"
}

// dateISO is the fallback for other locales: "2026-09-18 15:00 (GMT+7)".
func dateISO(t time.Time) string {
	return t.Format("2006-01-02 15:04") + " (" + gmtOffset(t) + ")"
}

// gmtOffset names t's zone offset the way readers know it: "GMT+7",
// "GMT+5:30", "GMT-3", "GMT". Go's abbreviation for Asia/Ho_Chi_Minh is
// "+07", which means little to a customer.
func gmtOffset(t time.Time) string {
	_, off := t.Zone()
	if off == 0 {
		return "GMT"
	}
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	h, m := off/3600, off%3600/60
	if m == 0 {
		return fmt.Sprintf("GMT%s%d", sign, h)
	}
	return fmt.Sprintf("GMT%s%d:%02d", sign, h, m)
}
