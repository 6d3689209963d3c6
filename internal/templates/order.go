package templates

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"golang.org/x/text/currency"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Order limits: an order outside them is refused (ReasonInvalidField).
const (
	// MaxItems is the most lines an order mail lists.
	MaxItems = 500
	// MaxQuantity is the largest quantity of one line.
	MaxQuantity = 1_000_000
)

// view is the only data templates receive: plain strings, already cleaned
// and formatted. None is of a template.HTML-like type, so html/template
// escapes every one of them for its context.
type view struct {
	// Locale is the locale used ("vi", "en"); it is a template directory
	// name, never event data.
	Locale       string
	Subject      string
	OrderID      string
	CustomerName string
	// Date is the order time in the configured zone, "" when unknown.
	Date  string
	Items []itemView
	Total string
}

// itemView is one formatted order line.
type itemView struct {
	SKU       string
	Name      string
	Quantity  string
	UnitPrice string
	LineTotal string
}

// recipient is the validated addressee of a mail.
type recipient struct {
	address string
	name    string
}

// buildView validates o and formats it for f. Errors are permanent
// *mailtype.Error values naming the field; none echoes the address or name.
func buildView(f *localeFormat, loc *time.Location, locale string, o Order) (view, recipient, error) {
	var rcpt recipient
	var err error
	if rcpt.address, err = checkEmail(o.Email); err != nil {
		return view{}, rcpt, err
	}
	if rcpt.name, err = DisplayName(o.CustomerName); err != nil {
		return view{}, rcpt, err
	}
	if o.OrderID == "" {
		return view{}, rcpt, missingField("order_id is empty")
	}
	if hasLineBreak(o.OrderID) {
		return view{}, rcpt, invalidField("order_id contains a line break")
	}
	v := view{Locale: locale, OrderID: clean(o.OrderID, MaxOrderIDRunes), CustomerName: rcpt.name}
	if !o.OccurredAt.IsZero() {
		v.Date = f.date(o.OccurredAt.In(loc))
	}
	v.Items, v.Total, err = formatLines(f, o)
	return v, rcpt, err
}

// formatLines formats the order lines and the total. Line totals
// (quantity × unit price) and their sum are exact integer arithmetic in
// minor units. The event's total is what the customer pays and is shown as
// it is, even when it differs from the sum of the lines (shipping, tax and
// discounts have no field of their own in the event contract, and refusing
// the mail would leave the customer without a confirmation). An empty
// total is taken to be the sum.
func formatLines(f *localeFormat, o Order) ([]itemView, string, error) {
	cur, scale, err := parseCurrency(o.Currency)
	if err != nil {
		return nil, "", invalidField(err.Error())
	}
	if len(o.Items) == 0 {
		return nil, "", missingField("items is empty: an order mail lists at least one item")
	}
	if len(o.Items) > MaxItems {
		return nil, "", invalidField(fmt.Sprintf("items has %d lines, over %d", len(o.Items), MaxItems))
	}
	sum := new(big.Int)
	items := make([]itemView, len(o.Items))
	for i, it := range o.Items {
		line, err := formatLine(f, cur, scale, it)
		if err != nil {
			return nil, "", fieldError(err, "items[%d].", i)
		}
		sum.Add(sum, line.total)
		items[i] = line.view
	}
	total, err := checkTotal(o.Total, scale, sum)
	if err != nil {
		return nil, "", err
	}
	totalText, err := f.money(money{minor: total, cur: cur, scale: scale})
	if err != nil {
		return nil, "", invalidField("total: " + err.Error())
	}
	return items, totalText, nil
}

// line is a formatted order line and its exact total in minor units.
type line struct {
	view  itemView
	total *big.Int
}

// formatLine validates and formats one item.
func formatLine(f *localeFormat, cur currency.Unit, scale int, it Item) (line, error) {
	if it.Quantity < 1 || it.Quantity > MaxQuantity {
		return line{}, invalidField(fmt.Sprintf("quantity %d is outside 1..%d", it.Quantity, MaxQuantity))
	}
	if clean(it.Name, MaxItemNameRunes) == "" {
		return line{}, missingField("name is empty")
	}
	unit, err := parseAmount(it.UnitPrice, scale)
	if err != nil {
		return line{}, invalidField("unit_price: " + err.Error())
	}
	total := new(big.Int).Mul(unit, big.NewInt(int64(it.Quantity)))
	v := itemView{SKU: clean(it.SKU, MaxSKURunes), Name: clean(it.Name, MaxItemNameRunes), Quantity: f.quantity(it.Quantity)}
	if v.UnitPrice, err = f.money(money{minor: unit, cur: cur, scale: scale}); err != nil {
		return line{}, invalidField("unit_price: " + err.Error())
	}
	if v.LineTotal, err = f.money(money{minor: total, cur: cur, scale: scale}); err != nil {
		return line{}, invalidField("line total: " + err.Error())
	}
	return line{view: v, total: total}, nil
}

// checkTotal parses the event's total (minor units). An empty total yields
// sum; a malformed one is an invalid_field error.
func checkTotal(s string, scale int, sum *big.Int) (*big.Int, error) {
	if s == "" {
		return sum, nil
	}
	total, err := parseAmount(s, scale)
	if err != nil {
		return nil, invalidField("total: " + err.Error())
	}
	return total, nil
}

func invalidField(msg string) error {
	return mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidField, "%s", msg)
}

func missingField(msg string) error {
	return mailtype.Errorf(mailtype.Permanent, mailtype.ReasonMissingField, "%s", msg)
}

func invalidAddress(msg string) error {
	return mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidAddress, "%s", msg)
}

// fieldError prefixes the message of a *mailtype.Error with a field path,
// keeping its class and reason.
func fieldError(err error, format string, args ...any) error {
	var e *mailtype.Error
	if !errors.As(err, &e) {
		return err
	}
	return mailtype.Errorf(e.Class, e.Reason, "%s%w", fmt.Sprintf(format, args...), e.Err)
}
