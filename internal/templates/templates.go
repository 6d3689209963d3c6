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
// money, CR/LF in a header value, invalid address), ReasonRender otherwise.
package templates

import (
	"fmt"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// OrderConfirmed is the name of the order confirmation template.
const OrderConfirmed = "order_confirmed"

// Options configures a Registry.
type Options struct {
	// Dir is an optional directory whose files override the embedded ones.
	Dir string
	// DefaultLocale is used for an unknown or empty locale ("vi" or "en").
	DefaultLocale string
	// TimeZone is the IANA zone dates are shown in.
	TimeZone string
}

// Order is the data of an order mail, as it arrives in the event.
type Order struct {
	OrderID      string
	Email        string
	CustomerName string
	Locale       string
	// Currency is an ISO 4217 code; Total and UnitPrice are decimal strings
	// in major units of it.
	Currency   string
	Total      string
	Items      []Item
	OccurredAt time.Time
}

// Item is one order line.
type Item struct {
	SKU       string
	Name      string
	Quantity  int
	UnitPrice string
}

// Rendered is a rendered mail.
type Rendered struct {
	// Locale is the locale actually used (after the default fallback).
	Locale  string
	Subject string
	Text    string
	HTML    string
}

// Settings are per-template settings kept beside the template.
type Settings struct {
	// AmbiguousPolicy overrides sender.ambiguous_policy; "" means use it.
	AmbiguousPolicy mailtype.AmbiguousPolicy
	// MaxEventAge overrides mail.max_event_age; 0 means use it.
	MaxEventAge time.Duration
}

// Registry holds the parsed templates. Safe for concurrent use.
type Registry struct {
	opts Options
	loc  *time.Location
}

// New loads the templates. PLACEHOLDER implementation (issue 6 replaces it).
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
	return &Registry{opts: o, loc: loc}, nil
}

// Settings returns the settings of template name.
func (r *Registry) Settings(name string) (Settings, error) {
	if name != OrderConfirmed {
		return Settings{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonUnknownTemplate, "unknown template %q", name)
	}
	return Settings{MaxEventAge: 24 * time.Hour}, nil
}

// Render renders template name for locale. PLACEHOLDER implementation.
func (r *Registry) Render(name, locale string, o Order) (Rendered, error) {
	if name != OrderConfirmed {
		return Rendered{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonUnknownTemplate, "unknown template %q", name)
	}
	if locale != "vi" && locale != "en" {
		locale = r.opts.DefaultLocale
	}
	if strings.ContainsAny(o.CustomerName, "\r\n") {
		return Rendered{}, mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidField, "customer_name contains a line break")
	}
	subj := "Order " + o.OrderID + " confirmed"
	if locale == "vi" {
		subj = "Xác nhận đơn hàng " + o.OrderID
	}
	text := fmt.Sprintf("%s\nTotal: %s %s\n", subj, o.Total, o.Currency)
	return Rendered{Locale: locale, Subject: subj, Text: text, HTML: "<p>" + subj + "</p>"}, nil
}
