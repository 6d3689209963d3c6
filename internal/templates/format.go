package templates

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/currency"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/number"
)

// localeFormat formats numbers, money and dates as a reader of one locale
// expects. It is immutable after newLocaleFormat, so safe for concurrent use.
type localeFormat struct {
	printer *message.Printer
	// decimalSep is the locale's decimal separator, learnt from x/text.
	decimalSep string
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
	// 15 at scale 1 prints "15,0" in vi and "15.0" in en: the separator is
	// what stands between the digits (no float is involved).
	sep := strings.Trim(p.Sprint(number.Decimal(15, number.Scale(1))), "0123456789")
	f := &localeFormat{printer: p, decimalSep: sep, symbolAfter: true, date: dateISO}
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
	num := f.printer.Sprint(number.Decimal(major))
	if digits != "" {
		num += f.decimalSep + digits
	}
	sym := f.printer.Sprint(currency.Symbol(m.cur))
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
	return f.printer.Sprint(number.Decimal(q))
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
