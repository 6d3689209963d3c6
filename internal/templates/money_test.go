package templates_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// oneLine is an order of one item of quantity 1 at price, in currency.
func oneLine(currency, price string) templates.Order {
	o := sampleOrder()
	o.Currency, o.Total = currency, price
	o.Items = []templates.Item{{SKU: "S", Name: "N", Quantity: 1, UnitPrice: price}}
	return o
}

// TestMoneyFormat checks the exact total line for each amount, locale and
// currency; the amounts are the list.
func TestMoneyFormat(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	cases := []struct{ currency, amount, vi, en string }{
		{"VND", "0", "0 ₫", "₫0"},
		{"VND", "1", "1 ₫", "₫1"},
		{"VND", "999", "999 ₫", "₫999"},
		{"VND", "1000", "1.000 ₫", "₫1,000"},
		{"VND", "1250000", "1.250.000 ₫", "₫1,250,000"},
		{"VND", "999999999999", "999.999.999.999 ₫", "₫999,999,999,999"},
		{"VND", "1250000.00", "1.250.000 ₫", "₫1,250,000"},
		{"vnd", "007", "7 ₫", "₫7"},
		{"USD", "12.50", "12,50 US$", "$12.50"},
		{"USD", "12.5", "12,50 US$", "$12.50"},
		{"USD", "12", "12,00 US$", "$12.00"},
		{"USD", "0.01", "0,01 US$", "$0.01"},
		{"USD", "1234567.89", "1.234.567,89 US$", "$1,234,567.89"},
		{"EUR", "0.10", "0,10 €", "€0.10"},
		{"BHD", "1.234", "1,234 BHD", "BHD 1.234"},
		{"JPY", "1500", "1.500 JP¥", "¥1,500"},
	}
	for _, c := range cases {
		for locale, want := range map[string]string{"vi": c.vi, "en": c.en} {
			out, err := r.Render(templates.OrderConfirmed, locale, oneLine(c.currency, c.amount))
			require.NoError(t, err, "%s %s %s", c.currency, c.amount, locale)
			label := map[string]string{"vi": "Tổng cộng: ", "en": "Total: "}[locale]
			require.Contains(t, out.Text, "\n"+label+want+"\n", "%s %s %s", c.currency, c.amount, locale)
		}
	}
}

// TestMoneyLineArithmetic checks quantity × price and the sum in exact
// decimal, where float64 would be off (0.10 × 3 and large VND values).
func TestMoneyLineArithmetic(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	o := sampleOrder()
	o.Currency, o.Total = "USD", "900719925474099.30"
	o.Items = []templates.Item{
		{Name: "a", Quantity: 3, UnitPrice: "0.10"},
		{Name: "b", Quantity: 1, UnitPrice: "900719925474099.00"},
	}
	out, err := r.Render(templates.OrderConfirmed, "en", o)
	require.NoError(t, err)
	require.Contains(t, out.Text, "  3 × $0.10 = $0.30\n")
	require.Contains(t, out.Text, "\nTotal: $900,719,925,474,099.30\n")

	o = sampleOrder()
	o.Total = ""
	out, err = r.Render(templates.OrderConfirmed, "vi", o)
	require.NoError(t, err, "an empty total is the sum of the lines")
	require.Contains(t, out.Text, "\nTổng cộng: 1.905.000 ₫\n")
}

// TestMoneyRejected checks that every malformed or inconsistent amount is a
// permanent invalid_field error that names the field.
// TestTotalIncludingShippingIsShownAsSent: the event's total is what the
// customer pays, even when the lines do not add up to it.
func TestTotalIncludingShippingIsShownAsSent(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	o := sampleOrder()
	o.Total = "1930000"
	out, err := r.Render(templates.OrderConfirmed, "vi", o)
	require.NoError(t, err)
	require.Contains(t, out.Text, "1.930.000")
}

func TestMoneyRejected(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	bad := []string{"", " 1", "1 ", "-1", "+1", "1e6", "1,5", "1.250.000", "12.5.0", ".5", "5.", "0x10",
		"NaN", "Inf", "١٢٣", "1\n", strings.Repeat("9", 41), "1250000.5"}
	for _, amount := range bad {
		o := oneLine("VND", "1")
		o.Items[0].UnitPrice = amount
		_, err := r.Render(templates.OrderConfirmed, "vi", o)
		requireReason(t, err, mailtype.ReasonInvalidField)
		require.Contains(t, err.Error(), "items[0].unit_price", "amount %q", amount)
	}
	for name, o := range map[string]templates.Order{
		"usd three decimals": oneLine("USD", "12.505"),
		"malformed total":    func() templates.Order { o := sampleOrder(); o.Total = "1.905.000"; return o }(),
		"unknown currency":   oneLine("ZZZ", "1"),
		"long currency":      oneLine("VNDX", "1"),
		"empty currency":     oneLine("", "1"),
		"over int64":         oneLine("VND", strings.Repeat("9", 20)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Render(templates.OrderConfirmed, "en", o)
			requireReason(t, err, mailtype.ReasonInvalidField)
		})
	}
}
