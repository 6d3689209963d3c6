package templates_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// hostile are values an attacker or a broken producer might put in any
// text field.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`' onmouseover='alert(1)`,
	`{{.Email}}`,
	"a\u202Egnp.exe\u202C b",
	"\u200Fمحمد\u200F",
	"😀👩🏽‍💻🇻🇳",
	"tab\there\x00nul\x7fdel",
	"bad utf8 \xff\xfe",
}

// TestHostileBodyFields puts each hostile value in every body field and
// checks the mail of every template is whole: markup escaped, no raw
// payload, no control or bidi override characters, subject one line.
func TestHostileBodyFields(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	for _, h := range hostile {
		for field, set := range map[string]func(*templates.Order){
			"customer_name": func(o *templates.Order) { o.CustomerName = h },
			"order_id":      func(o *templates.Order) { o.OrderID = h },
			"item name":     func(o *templates.Order) { o.Items[0].Name = h },
			"sku":           func(o *templates.Order) { o.Items[1].SKU = h },
		} {
			o := sampleOrder()
			set(&o)
			for _, name := range allTemplates {
				for _, locale := range locales {
					out, err := r.Render(name, locale, o)
					require.NoError(t, err, "%s %s: %s = %q", name, locale, field, h)
					requireWhole(t, out)
				}
			}
		}
	}
}

// requireWhole checks the invariants every rendered mail keeps.
func requireWhole(t *testing.T, out templates.Rendered) {
	t.Helper()
	require.NotContains(t, out.HTML, "<script")
	require.NotContains(t, out.HTML, "<img")
	require.True(t, utf8.ValidString(out.Subject+out.Text+out.HTML+out.ToName))
	// data is never evaluated as a template: "{{.Email}}" stays literal.
	require.NotContains(t, out.Text+out.HTML, "b@example.com")
	for _, s := range []string{out.Subject, out.ToName} {
		require.False(t, strings.ContainsAny(s, "\r\n\t\x00\x7f\u2028\u2029\u0085"), "header value %q", s)
	}
	for _, s := range []string{out.Subject, out.Text, out.HTML, out.ToName} {
		require.False(t, strings.ContainsAny(s, "\u202A\u202B\u202C\u202D\u202E\u2066\u2067\u2068\u2069\x00"), "bidi override or NUL in %q", s)
	}
	require.Equal(t, 1, strings.Count(out.HTML, "</html>"))
	require.Equal(t, 4, strings.Count(out.HTML, "<table "))
	require.Equal(t, 4, strings.Count(out.HTML, "</table>"))
	require.Equal(t, strings.Count(out.HTML, "<tr>"), strings.Count(out.HTML, "</tr>"))
	require.Equal(t, strings.Count(out.HTML, "<td"), strings.Count(out.HTML, "</td>"))
}

// TestHostileEscapedExactly checks the exact escaped form of markup in
// every template.
func TestHostileEscapedExactly(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	o := sampleOrder()
	o.Items[0].Name = `"><img src=x onerror=alert(1)>`
	o.CustomerName = `<script>alert(1)</script>`
	for _, name := range allTemplates {
		out, err := r.Render(name, "en", o)
		require.NoError(t, err, name)
		require.Contains(t, out.HTML, `&#34;&gt;&lt;img src=x onerror=alert(1)&gt;<br>`, name)
		require.Contains(t, out.HTML, `Hello &lt;script&gt;alert(1)&lt;/script&gt;,`, name)
		require.Contains(t, out.Text, "Hello <script>alert(1)</script>,\n", "%s: the text part shows the name as written", name)
		require.Equal(t, "<script>alert(1)</script>", out.ToName, name)
	}
}

// TestHeaderFieldsWithLineBreaks checks, for every template, that a line
// break in a value bound for a header is refused, and that one in a
// body-only field is flattened.
func TestHeaderFieldsWithLineBreaks(t *testing.T) {
	t.Parallel()
	for _, name := range allTemplates {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireLineBreaksHandled(t, newRegistry(t), name)
		})
	}
	_, err := templates.DisplayName("a\nb")
	requireReason(t, err, mailtype.ReasonInvalidField)
}

// requireLineBreaksHandled checks the line-break rules for template name.
func requireLineBreaksHandled(t *testing.T, r *templates.Registry, name string) {
	t.Helper()
	for _, br := range []string{"\r\n", "\n", "\r", "\u2028", "\u0085"} {
		o := sampleOrder()
		o.CustomerName = "B" + br + "Bcc: victim@example.com"
		_, err := r.Render(name, "vi", o)
		requireReason(t, err, mailtype.ReasonInvalidField)
		require.Contains(t, err.Error(), "customer_name")
		require.NotContains(t, err.Error(), "victim")

		o = sampleOrder()
		o.OrderID = "42" + br + "Subject: x"
		_, err = r.Render(name, "vi", o)
		requireReason(t, err, mailtype.ReasonInvalidField)
		require.Contains(t, err.Error(), "order_id")

		o = sampleOrder()
		o.Items[0].Name = "Áo" + br + "Tổng cộng: 0 ₫"
		out, err := r.Render(name, "vi", o)
		require.NoError(t, err)
		require.Contains(t, out.Text, "\n- Áo Tổng cộng: 0 ₫ (mã SKU-1)\n")
		require.Equal(t, 1, strings.Count(out.Text, "\nTổng cộng:"))
	}
}

// TestLongValues checks, for every template, that 10,000-character values
// are cut, with "…", on a character boundary, and the subject stays short.
func TestLongValues(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	o := sampleOrder()
	o.CustomerName = strings.Repeat("Nguyễn ", 10_000/7)
	o.OrderID = strings.Repeat("9", 10_000)
	o.Items[0].Name = strings.Repeat("x", 10_000)
	o.Items[1].SKU = strings.Repeat("S", 10_000)
	id := strings.Repeat("9", templates.MaxOrderIDRunes-1) + "…"
	subjects := map[string]string{
		templates.OrderConfirmed: "Xác nhận đơn hàng #" + id,
		templates.OrderCancelled: "Đơn hàng #" + id + " đã bị hủy",
	}
	require.Len(t, subjects, len(allTemplates))
	for _, name := range allTemplates {
		out, err := r.Render(name, "vi", o)
		require.NoError(t, err, name)
		requireWhole(t, out)
		// 9 × "Nguyễn " is 63 runes; the trailing space goes before the "…".
		require.Equal(t, strings.Repeat("Nguyễn ", 8)+"Nguyễn…", out.ToName, name)
		require.LessOrEqual(t, utf8.RuneCountInString(out.ToName), templates.MaxNameRunes, name)
		require.Equal(t, subjects[name], out.Subject)
		require.Contains(t, out.Text, "\n- "+strings.Repeat("x", templates.MaxItemNameRunes-1)+"… (mã SKU-1)\n", name)
		require.Contains(t, out.Text, "(mã "+strings.Repeat("S", templates.MaxSKURunes-1)+"…)\n", name)
		require.Less(t, len(out.HTML), 12_000, name)
	}
}

// TestTruncateKeepsCharacters checks the cut never splits a letter from its
// combining mark nor an emoji sequence.
func TestTruncateKeepsCharacters(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		// 62 'a', then e + combining circumflex + combining acute (NFC
		// composes it to one rune "ế", so the cut falls after it).
		strings.Repeat("a", 62) + "e\u0302\u0301xyz": strings.Repeat("a", 62) + "ế…",
		// a ZWJ family emoji straddling the cut is dropped whole.
		strings.Repeat("a", 61) + "👩\u200D👩\u200D👧xyz": strings.Repeat("a", 61) + "…",
		// a thumbs-up with skin tone straddling the cut is dropped whole.
		strings.Repeat("a", 62) + "👍🏽xyz": strings.Repeat("a", 62) + "…",
	}
	for in, want := range cases {
		got, err := templates.DisplayName(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// TestBadRecipientOrData checks, for every template, the errors for a bad
// address, missing fields and out-of-range quantities.
func TestBadRecipientOrData(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	cases := []struct {
		name   string
		mutate func(*templates.Order)
		reason mailtype.Reason
	}{
		{"empty email", func(o *templates.Order) { o.Email = "" }, mailtype.ReasonMissingField},
		{"no at", func(o *templates.Order) { o.Email = "b.example.com" }, mailtype.ReasonInvalidAddress},
		{"crlf", func(o *templates.Order) { o.Email = "b@example.com\r\nBcc: c@example.com" }, mailtype.ReasonInvalidAddress},
		{"lf only", func(o *templates.Order) { o.Email = "b@example.com\n" }, mailtype.ReasonInvalidAddress},
		{"display name", func(o *templates.Order) { o.Email = "B <b@example.com>" }, mailtype.ReasonInvalidAddress},
		{"two addresses", func(o *templates.Order) { o.Email = "b@example.com, c@example.com" }, mailtype.ReasonInvalidAddress},
		{"spaces", func(o *templates.Order) { o.Email = " b@example.com" }, mailtype.ReasonInvalidAddress},
		{"too long", func(o *templates.Order) { o.Email = strings.Repeat("b", 250) + "@example.com" }, mailtype.ReasonInvalidAddress},
		{"empty order id", func(o *templates.Order) { o.OrderID = "" }, mailtype.ReasonMissingField},
		{"no items", func(o *templates.Order) { o.Items = nil; o.Total = "0" }, mailtype.ReasonMissingField},
		{"blank item name", func(o *templates.Order) { o.Items[0].Name = " \t" }, mailtype.ReasonMissingField},
		{"zero quantity", func(o *templates.Order) { o.Items[0].Quantity = 0 }, mailtype.ReasonInvalidField},
		{"negative quantity", func(o *templates.Order) { o.Items[0].Quantity = -2 }, mailtype.ReasonInvalidField},
		{"huge quantity", func(o *templates.Order) { o.Items[0].Quantity = templates.MaxQuantity + 1 }, mailtype.ReasonInvalidField},
		{"too many items", func(o *templates.Order) {
			o.Items = make([]templates.Item, templates.MaxItems+1)
		}, mailtype.ReasonInvalidField},
	}
	for _, name := range allTemplates {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				o := sampleOrder()
				c.mutate(&o)
				_, err := r.Render(name, "vi", o)
				requireReason(t, err, c.reason)
				require.NotContains(t, err.Error(), "example.com", "errors never echo the address")
			})
		}
	}
}

// TestEmptyName renders the greeting of every template without a name.
func TestEmptyName(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	o := sampleOrder()
	o.CustomerName = " \u202E "
	for _, name := range allTemplates {
		out, err := r.Render(name, "vi", o)
		require.NoError(t, err, name)
		require.Equal(t, "", out.ToName, name)
		require.True(t, strings.HasPrefix(out.Text, "Xin chào quý khách,\n"), name)
		require.Contains(t, out.HTML, ">Xin chào quý khách,</p>", name)
		out, err = r.Render(name, "en", o)
		require.NoError(t, err, name)
		require.True(t, strings.HasPrefix(out.Text, "Hello,\n"), name)
		require.Contains(t, out.HTML, ">Hello,</p>", name)
	}
}
