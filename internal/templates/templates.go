// Package templates renders customer mails (subject, text and HTML) from
// event data, per template and locale. Rendering is deterministic: the same
// input always gives the same bytes, so every send attempt of a mail is
// identical. Templates are embedded; templates.dir may override them.
//
// API CONTRACT (other packages code against this; keep it stable):
//
//	New(Options) (*Registry, error)
//	(*Registry).Render(name, locale string, o Order) (Rendered, error)
//	(*Registry).Settings(name string) (Settings, error)
//
// Errors are *mailtype.Error of class Permanent: ReasonUnknownTemplate for
// an unknown template name, ReasonInvalidField for bad data (malformed
// money, a total that is not the sum of its lines, CR/LF in a header value
// such as customer_name or order_id), ReasonInvalidAddress for an invalid
// recipient address, ReasonMissingField for an empty order_id, email, item
// name or item list, ReasonRender otherwise (a template that fails to
// execute or yields a subject with a line break).
//
// Safety: templates only ever receive plain strings, cleaned (control
// characters and bidi overrides removed, long values cut with "…", see
// MaxNameRunes and friends) and formatted; html/template escapes each for
// its HTML context, text/template is used for the subject and text part. A
// customer name or order id with a line break is refused, not mended; one
// in an item name or SKU (body only) becomes a space. Money is exact
// (integer minor units, never float) and formatted with golang.org/x/text;
// dates are shown in Options.TimeZone, whose data is embedded (time/tzdata).
package templates

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"
	_ "time/tzdata" // a minimal container has no zoneinfo

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Template names. Both render from the same Order: the notice is given the
// data of the order as it was confirmed (items, total, currency, locale).
const (
	// OrderConfirmed is the name of the order confirmation template.
	OrderConfirmed = "order_confirmed"
	// OrderCancelled is the name of the cancellation notice: the mail a
	// customer gets when an order is cancelled after its confirmation was
	// (or may have been) delivered. It says the order was cancelled, that
	// the earlier confirmation no longer applies and that a payment is
	// refunded per the shop's policy, and repeats the confirmed items and
	// total. Its settings.yaml sets max_event_age to 72h.
	OrderCancelled = mailtype.TemplateCancelNotice
)

// Options configures a Registry.
type Options struct {
	// Dir is an optional directory whose files override the embedded ones,
	// file by file, with the same layout (<name>/<locale>/subject.txt,
	// body.txt, body.html and <name>/settings.yaml). "" means none.
	Dir string
	// DefaultLocale is used for an unknown or empty locale ("vi" or "en");
	// "" means "vi". Every template must have it.
	DefaultLocale string
	// TimeZone is the IANA zone dates are shown in; "" means
	// "Asia/Ho_Chi_Minh".
	TimeZone string
}

// Order is the data of an order mail, as the OrderConfirmed event gives it;
// the cancellation notice (OrderCancelled) is rendered from the same data.
type Order struct {
	OrderID      string
	Email        string
	CustomerName string
	// Locale is used when Render is given no locale.
	Locale string
	// Currency is an ISO 4217 code; Total and UnitPrice are decimal strings
	// in major units of it. Total is what the customer pays, shown as
	// given even when it differs from the lines (shipping, discounts); ""
	// means the sum of quantity × unit price over Items.
	Currency   string
	Total      string
	Items      []Item
	OccurredAt time.Time
}

// Item is one order line. Quantity is 1..MaxQuantity.
type Item struct {
	SKU       string
	Name      string
	Quantity  int
	UnitPrice string
}

// Rendered is a rendered mail.
type Rendered struct {
	// Locale is the locale actually used (after the default fallback).
	Locale string
	// Subject is one line: it never contains CR, LF or another control
	// character.
	Subject string
	// Text is the plain-text part, LF line endings, ending in one LF.
	Text string
	// HTML is the HTML part: a full document, inline styles, no external
	// resources.
	HTML string
	// ToAddress is the validated recipient address (the bare addr-spec).
	ToAddress string
	// ToName is the display name for the To header (see DisplayName): no
	// control characters, at most MaxNameRunes runes; "" when there is none.
	ToName string
}

// Settings are per-template settings kept beside the template
// (<name>/settings.yaml).
type Settings struct {
	// AmbiguousPolicy overrides sender.ambiguous_policy; "" means use it.
	AmbiguousPolicy mailtype.AmbiguousPolicy
	// MaxEventAge overrides mail.max_event_age; 0 means use it.
	MaxEventAge time.Duration
	// Lane is the priority lane of the template's mails (settings.yaml
	// lane: priority or bulk; "" or no file: priority for order_cancelled,
	// bulk otherwise).
	Lane mailtype.Lane
}

// Registry holds the parsed templates. It is immutable after New and safe
// for concurrent use.
type Registry struct {
	opts    Options
	loc     *time.Location
	entries map[string]*entry
	formats map[string]*localeFormat
}

// New loads and parses every template (embedded, overridden by o.Dir), then
// renders each template and locale once with sample data, so a broken
// override fails at start-up with the file's name instead of at send time.
// It fails on an unknown time zone, a missing default locale, a missing or
// unparsable file, or invalid settings.
func New(o Options) (*Registry, error) {
	if o.DefaultLocale == "" {
		o.DefaultLocale = "vi"
	}
	if o.TimeZone == "" {
		o.TimeZone = "Asia/Ho_Chi_Minh"
	}
	loc, err := time.LoadLocation(o.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("templates time zone: %w", err)
	}
	ls, err := sources(o.Dir)
	if err != nil {
		return nil, err
	}
	entries, err := load(ls)
	if err != nil {
		return nil, fmt.Errorf("load templates: %w", err)
	}
	r := &Registry{opts: o, loc: loc, entries: entries, formats: map[string]*localeFormat{}}
	if err := r.prepare(); err != nil {
		return nil, err
	}
	return r, nil
}

// sources returns the template layers: dir (when set) over the embedded set.
func sources(dir string) (layers, error) {
	sub, err := fs.Sub(embedded, "files")
	if err != nil {
		return nil, fmt.Errorf("embedded templates: %w", err)
	}
	ls := layers{{fsys: sub, name: "embedded"}}
	if dir == "" {
		return ls, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("templates.dir %q: not a readable directory", dir)
	}
	return append(layers{{fsys: os.DirFS(dir), name: dir}}, ls...), nil
}

// prepare builds the locale formats and self-checks every template.
func (r *Registry) prepare() error {
	for _, name := range r.Names() {
		e := r.entries[name]
		if _, ok := e.locales[r.opts.DefaultLocale]; !ok {
			return fmt.Errorf("template %s has no default locale %q", name, r.opts.DefaultLocale)
		}
		for loc := range e.locales {
			if r.formats[loc] != nil {
				continue
			}
			f, err := newLocaleFormat(loc)
			if err != nil {
				return fmt.Errorf("template %s: %w", name, err)
			}
			r.formats[loc] = f
		}
		for _, loc := range r.Locales(name) {
			for _, o := range sampleOrders() {
				if _, err := r.Render(name, loc, o); err != nil {
					return fmt.Errorf("template %s/%s: self-check: %w", name, loc, err)
				}
			}
		}
	}
	return nil
}

// Names returns the template names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Locales returns the locales of template name, sorted; nil for an unknown
// name.
func (r *Registry) Locales(name string) []string {
	e := r.entries[name]
	if e == nil {
		return nil
	}
	locs := make([]string, 0, len(e.locales))
	for l := range e.locales {
		locs = append(locs, l)
	}
	sort.Strings(locs)
	return locs
}

// Settings returns the settings of template name, or a permanent
// ReasonUnknownTemplate error.
func (r *Registry) Settings(name string) (Settings, error) {
	e, err := r.entry(name)
	if err != nil {
		return Settings{}, err
	}
	return e.settings, nil
}

func (r *Registry) entry(name string) (*entry, error) {
	e := r.entries[name]
	if e == nil {
		return nil, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonUnknownTemplate, "unknown template %q", quoteShort(name))
	}
	return e, nil
}

// resolve picks the locale to render: locale, else fallback, reduced to its
// base language ("vi-VN", "VI", "en_GB" -> "vi", "en"), when the template
// has it; else the default locale.
func (r *Registry) resolve(e *entry, locale, fallback string) string {
	if locale == "" {
		locale = fallback
	}
	l := strings.ToLower(strings.TrimSpace(locale))
	if i := strings.IndexAny(l, "-_"); i >= 0 {
		l = l[:i]
	}
	if _, ok := e.locales[l]; ok {
		return l
	}
	return r.opts.DefaultLocale
}

// Render renders template name for locale ("" means o.Locale; an unknown
// locale means Options.DefaultLocale). The same arguments always give the
// same bytes. Errors are permanent *mailtype.Error values (see the package
// comment); they never quote the address or the name.
func (r *Registry) Render(name, locale string, o Order) (Rendered, error) {
	e, err := r.entry(name)
	if err != nil {
		return Rendered{}, err
	}
	loc := r.resolve(e, locale, o.Locale)
	set := e.locales[loc]
	v, rcpt, err := buildView(r.formats[loc], r.loc, loc, o)
	if err != nil {
		return Rendered{}, err
	}
	out := Rendered{Locale: loc, ToAddress: rcpt.address, ToName: rcpt.name}
	if out.Subject, err = execSubject(set, v); err != nil {
		return Rendered{}, err
	}
	v.Subject = out.Subject
	var text, html bytes.Buffer
	if err := set.text.Execute(&text, v); err != nil {
		return Rendered{}, renderError(err)
	}
	if err := set.html.Execute(&html, v); err != nil {
		return Rendered{}, renderError(err)
	}
	out.Text = strings.TrimRight(text.String(), "\n") + "\n"
	out.HTML = html.String()
	return out, nil
}

// execSubject renders the subject: one trimmed, non-empty line with no
// control character, whatever an override template does.
func execSubject(set *tmplSet, v view) (string, error) {
	var b strings.Builder
	if err := set.subject.Execute(&b, v); err != nil {
		return "", renderError(err)
	}
	s := strings.TrimSpace(b.String())
	if s == "" || hasLineBreak(s) || strings.ContainsFunc(s, isControl) {
		return "", mailtype.Errorf(mailtype.Permanent, mailtype.ReasonRender, "%s: subject must be one non-empty line", set.subject.Name())
	}
	return s, nil
}

func renderError(err error) error {
	return mailtype.NewError(mailtype.Permanent, mailtype.ReasonRender, err)
}

// sampleOrders are rendered by New to check every template: one with every
// field, one with the optional fields empty.
func sampleOrders() []Order {
	full := Order{
		OrderID: "42", Email: "b@example.com", CustomerName: "Nguyễn Văn B", Currency: "VND", Total: "1250000",
		Items:      []Item{{SKU: "SKU-1", Name: "Áo thun", Quantity: 2, UnitPrice: "625000"}},
		OccurredAt: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
	bare := Order{OrderID: "1", Email: "a@example.com", Currency: "USD", Items: []Item{{Name: "x", Quantity: 1, UnitPrice: "0"}}}
	return []Order{full, bare}
}
