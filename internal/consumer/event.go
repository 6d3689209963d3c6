package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// SupportedVersion is the only input event version this consumer reads
// (docs/contract.md, "Input").
const SupportedVersion = 1

// Field limits, in bytes. A dedupe key or order id longer than this could
// not be indexed (a btree entry holds about 2.7 kB) and is no real key.
const (
	maxKeyLen     = 512
	maxOrderIDLen = 200
	maxAddressLen = 254 // RFC 5321 path limit
	maxLocaleLen  = 35  // BCP 47 practical maximum
	maxAmountLen  = 40
)

// envelope is the input event (docs/contract.md, "Input"). Pointer fields tell
// "absent or null" from a zero value; unknown fields are ignored.
type envelope struct {
	EventID    *string         `json:"event_id"`
	EventType  *string         `json:"event_type"`
	Version    *int            `json:"version"`
	OccurredAt *time.Time      `json:"occurred_at"`
	DedupeKey  *string         `json:"dedupe_key"`
	Data       json.RawMessage `json:"data"`
}

// orderData is OrderConfirmed.data; OrderCancelled.data needs only OrderID.
type orderData struct {
	OrderID      *orderID   `json:"order_id"`
	Email        *string    `json:"email"`
	CustomerName string     `json:"customer_name"`
	Locale       string     `json:"locale"`
	Currency     *string    `json:"currency"`
	Total        *string    `json:"total"`
	Items        []itemData `json:"items"`
	// Attachments is data.attachments (attachments.go).
	Attachments []attachmentData `json:"attachments"`
	// Revision is data.revision, kept raw so that its check can tell 2
	// from 2.5, "2" and null.
	Revision json.RawMessage `json:"revision"`
}

// maxRevision is the largest revision accepted: the mail.revision column is
// a PostgreSQL integer.
const maxRevision = math.MaxInt32

// revision reads data.revision: absent means 1; otherwise a JSON integer
// written without fraction or exponent, like every integer of the
// contract (2, not 2.0 or 2e0), from 1 to maxRevision, else
// invalid_field. A null revision is invalid too: the contract says
// absent, not null.
func (d *orderData) revision() (int, *mailtype.Error) {
	if len(d.Revision) == 0 {
		return 1, nil
	}
	n, err := strconv.ParseInt(string(d.Revision), 10, 64)
	if err != nil || n < 1 || n > maxRevision || d.Revision[0] == '+' {
		return 0, permanent(mailtype.ReasonInvalidField, "data.revision %s is not an integer from 1 to %d", mailtype.Sanitize(string(d.Revision)), maxRevision)
	}
	return int(n), nil
}

// reservedOrderIDRE matches order ids that would share their dedupe keys
// with another order's: a key suffix ":r{n}" names a revision and
// ":resend:" an operator's resend (mailtype.ConfirmationKeyAt,
// store.ResendSuffix).
var reservedOrderIDRE = regexp.MustCompile(`:(r[0-9]+$|resend:)`)

type itemData struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice string `json:"unit_price"`
}

// orderID is an order id that arrives as a JSON string or an integer
// number; it is kept as text, digits exactly as sent.
type orderID string

var integerRE = regexp.MustCompile(`^-?[0-9]+$`)

func (o *orderID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*o = orderID(s)
		return nil
	}
	if !integerRE.Match(b) {
		return errors.New("order_id must be a string or an integer")
	}
	*o = orderID(b)
	return nil
}

var (
	currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)
	amountRE   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
)

func permanent(reason mailtype.Reason, format string, args ...any) *mailtype.Error {
	return mailtype.Errorf(mailtype.Permanent, reason, format, args...)
}

// decodeJSON unmarshals b into v and classifies a failure: a body that is
// not one JSON object is malformed_json, a field of the wrong type is
// invalid_field.
func decodeJSON(b []byte, v any, what string) *mailtype.Error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return permanent(mailtype.ReasonMalformedJSON, "%s is not valid JSON: %v", what, err)
	case errors.As(err, &typ) && typ.Field == "":
		return permanent(mailtype.ReasonMalformedJSON, "%s is not a JSON object: %v", what, err)
	default:
		return permanent(mailtype.ReasonInvalidField, "%s: %v", what, err)
	}
}

// checkText refuses a value with a line break or a NUL byte (header
// injection; PostgreSQL text cannot hold NUL) or longer than max bytes
// (max 0: no limit).
func checkText(field, v string, max int) *mailtype.Error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return permanent(mailtype.ReasonInvalidField, "%s contains a line break or a NUL byte", field)
	}
	if max > 0 && len(v) > max {
		return permanent(mailtype.ReasonInvalidField, "%s is %d bytes, more than %d", field, len(v), max)
	}
	return nil
}

// checkIdentifier refuses an empty value (missing_field), a control
// character or surrounding space, or more than max bytes.
func checkIdentifier(field, v string, max int) *mailtype.Error {
	if v == "" {
		return permanent(mailtype.ReasonMissingField, "%s is required", field)
	}
	if strings.TrimSpace(v) != v || strings.IndexFunc(v, isControl) >= 0 {
		return permanent(mailtype.ReasonInvalidField, "%s contains a control character or surrounding space", field)
	}
	if len(v) > max {
		return permanent(mailtype.ReasonInvalidField, "%s is %d bytes, more than %d", field, len(v), max)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkAddress accepts one bare RFC 5322 addr-spec (no display name, no
// comments, no line break) of at most maxAddressLen bytes.
func checkAddress(v string) *mailtype.Error {
	if v == "" {
		return permanent(mailtype.ReasonMissingField, "data.email is required")
	}
	if len(v) > maxAddressLen || strings.IndexFunc(v, isControl) >= 0 || strings.TrimSpace(v) != v {
		return permanent(mailtype.ReasonInvalidAddress, "data.email is not a single address")
	}
	a, err := mail.ParseAddress(v)
	if err != nil || a.Name != "" || a.Address != v {
		return permanent(mailtype.ReasonInvalidAddress, "data.email is not a valid address")
	}
	return nil
}

// checkEnvelope validates the fields every handled event needs, after the
// event type: version, event_id (a UUID, returned in canonical form),
// occurred_at, and the AMQP message_id, which must equal event_id when set.
func checkEnvelope(env *envelope, messageID string) (string, *mailtype.Error) {
	if env.Version == nil {
		return "", permanent(mailtype.ReasonMissingField, "version is required")
	}
	if *env.Version != SupportedVersion {
		return "", permanent(mailtype.ReasonUnsupportedVersion, "version %d is not supported (only %d)", *env.Version, SupportedVersion)
	}
	if env.EventID == nil || *env.EventID == "" {
		return "", permanent(mailtype.ReasonMissingField, "event_id is required")
	}
	id, err := uuid.Parse(*env.EventID)
	if err != nil || len(*env.EventID) != 36 {
		return "", permanent(mailtype.ReasonInvalidField, "event_id %q is not a UUID", mailtype.Sanitize(*env.EventID))
	}
	if messageID != "" {
		mid, err := uuid.Parse(messageID)
		if err != nil || mid != id {
			return "", permanent(mailtype.ReasonMessageIDMismatch, "message_id %q differs from event_id %s", mailtype.Sanitize(messageID), id)
		}
	}
	if env.OccurredAt == nil || env.OccurredAt.IsZero() {
		return "", permanent(mailtype.ReasonMissingField, "occurred_at is required")
	}
	return id.String(), nil
}

// checkOrder validates OrderConfirmed.data (docs/contract.md, "Input"). Money
// is a non-negative decimal string; the templates check the rest (a total
// that is not the sum of its lines, an empty item list, quantities) and
// format it.
func checkOrder(d *orderData) *mailtype.Error {
	if d.Email == nil {
		return permanent(mailtype.ReasonMissingField, "data.email is required")
	}
	if err := checkAddress(*d.Email); err != nil {
		return err
	}
	if d.Currency == nil {
		return permanent(mailtype.ReasonMissingField, "data.currency is required")
	}
	if !currencyRE.MatchString(*d.Currency) {
		return permanent(mailtype.ReasonInvalidField, "data.currency %q is not an ISO 4217 code", mailtype.Sanitize(*d.Currency))
	}
	if d.Total != nil { // absent: the templates use the sum of the lines
		if err := checkAmount("data.total", *d.Total); err != nil {
			return err
		}
	}
	if err := checkText("data.customer_name", d.CustomerName, 0); err != nil {
		return err
	}
	if d.Locale != "" {
		if err := checkIdentifier("data.locale", d.Locale, maxLocaleLen); err != nil {
			return err
		}
	}
	for i, it := range d.Items {
		field := fmt.Sprintf("data.items[%d]", i)
		if it.Quantity <= 0 {
			return permanent(mailtype.ReasonInvalidField, "%s.quantity must be positive", field)
		}
		if err := checkAmount(field+".unit_price", it.UnitPrice); err != nil {
			return err
		}
		if err := checkText(field+".name", it.Name, 0); err != nil {
			return err
		}
		if err := checkText(field+".sku", it.SKU, 0); err != nil {
			return err
		}
	}
	return nil
}

func checkAmount(field, v string) *mailtype.Error {
	if len(v) > maxAmountLen || !amountRE.MatchString(v) {
		return permanent(mailtype.ReasonInvalidField, "%s %q is not a decimal amount", field, mailtype.Sanitize(v))
	}
	return nil
}

// parseOrderID reads data.order_id, which both event types require.
func parseOrderID(raw json.RawMessage) (string, *orderData, *mailtype.Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, permanent(mailtype.ReasonMissingField, "data is required")
	}
	var d orderData
	if err := decodeJSON(raw, &d, "data"); err != nil {
		return "", nil, err
	}
	if d.OrderID == nil {
		return "", nil, permanent(mailtype.ReasonMissingField, "data.order_id is required")
	}
	id := string(*d.OrderID)
	if err := checkIdentifier("data.order_id", id, maxOrderIDLen); err != nil {
		return "", nil, err
	}
	if reservedOrderIDRE.MatchString(id) {
		return "", nil, permanent(mailtype.ReasonInvalidField,
			"data.order_id %q ends in :r and digits or contains :resend:, which name a revision and a resend in dedupe keys: it would share keys with another order", mailtype.Sanitize(id))
	}
	return id, &d, nil
}
