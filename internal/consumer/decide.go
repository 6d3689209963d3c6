package consumer

import (
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// Renderer renders mails once, at ingest; *templates.Registry implements
// it. Errors are *mailtype.Error of class Permanent.
type Renderer interface {
	Render(name, locale string, o templates.Order) (templates.Rendered, error)
	Settings(name string) (templates.Settings, error)
}

// Action is what the transport does with one delivery.
type Action int

const (
	// ActionRecord: record Decision.Item in the database, then ack.
	ActionRecord Action = iota
	// ActionIgnore: ack without recording (an event type mailsvc does not
	// handle).
	ActionIgnore
	// ActionDeadLetter: publish to the dead-letter exchange with
	// Decision.Err as the reason, wait for the confirm, then ack.
	ActionDeadLetter
)

// Metric label for an event type the consumer does not handle or could
// not read; keeps the event_type label a closed set.
const eventTypeOther = "other"

// Message is what the decision needs from a delivery.
type Message struct {
	Body []byte
	// MessageID is the AMQP message_id property, "" when absent.
	MessageID string
}

// Decision is the result of Decide for one message.
type Decision struct {
	Action Action
	// EventType is the metric label: OrderConfirmed, OrderCancelled or
	// "other".
	EventType string
	// EventID is the canonical event_id, "" when it could not be read.
	EventID string
	// Item is set for ActionRecord.
	Item store.IngestItem
	// Err is set for ActionDeadLetter; its class is Permanent.
	Err *mailtype.Error
	// OccurredAt is the event's occurred_at, set for ActionRecord: where
	// mailsvc_event_lag_seconds counts from.
	OccurredAt time.Time
}

// Decider classifies messages without touching the broker or the
// database. Safe for concurrent use when Templates is.
type Decider struct {
	// MaxBytes is the largest body accepted, in bytes.
	MaxBytes int
	// MaxEventAge is the default age limit of an OrderConfirmed; a
	// template's Settings.MaxEventAge overrides it when non-zero.
	MaxEventAge time.Duration
	// FromDomain is the domain of Message-IDs (mail.from's domain).
	FromDomain string
	// From, ReplyTo and IdempotencyNamespace complete the envelope stored
	// with each new mail (mail.from, mail.reply_to, the resolved
	// mail.idempotency_namespace), so that every attempt sends the same
	// bytes whatever the config says later.
	From, ReplyTo, IdempotencyNamespace string
	Templates                           Renderer
	// Attachments says whether and how much data.attachments may carry.
	Attachments AttachmentRules
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Decide validates m (docs/contract.md, "Input") and says what to do with it:
// record an OrderConfirmed (rendered once, marked stale when too old) or
// an OrderCancelled, ignore another event type, or dead-letter a message
// that can never succeed (too large, malformed, an object with a key
// repeated in any letter case, a missing or invalid field, a value
// PostgreSQL cannot store, an unsupported version, a message_id that
// differs from event_id, a bad address, a render error).
func (d *Decider) Decide(m Message) Decision {
	if len(m.Body) > d.MaxBytes {
		return deadLetter(eventTypeOther, "", permanent(mailtype.ReasonTooLarge, "body is %d bytes, more than %d", len(m.Body), d.MaxBytes))
	}
	// Before anything is decoded, not even event_type: an object with two
	// keys encoding/json takes for one field (equal, or equal but for
	// letter case) is read differently by other parsers, so which
	// recipient, type or id it carries is not well defined.
	dup, scanErr := findDuplicateKey(m.Body)
	if dup != nil {
		return deadLetter(eventTypeOther, "", mailtype.NewError(mailtype.Permanent, mailtype.ReasonMalformedJSON, dup))
	}
	var env envelope
	if err := decodeJSON(m.Body, &env, "body"); err != nil {
		return deadLetter(eventTypeOther, "", err)
	}
	if scanErr != nil {
		// Not reached: what the scan cannot read, json.Unmarshal refuses
		// (above). Should they ever differ, refuse rather than trust keys
		// nobody checked.
		return deadLetter(eventTypeOther, "", permanent(mailtype.ReasonMalformedJSON, "body: its keys could not be checked for duplicates: %v", scanErr))
	}
	if env.EventType == nil || *env.EventType == "" {
		return deadLetter(eventTypeOther, "", permanent(mailtype.ReasonMissingField, "event_type is required"))
	}
	typ := mailtype.EventType(*env.EventType)
	if typ != mailtype.OrderConfirmed && typ != mailtype.OrderCancelled {
		return Decision{Action: ActionIgnore, EventType: eventTypeOther}
	}
	eventID, err := checkEnvelope(&env, m.MessageID)
	if err != nil {
		return deadLetter(string(typ), idForLog(env.EventID), err)
	}
	orderID, data, err := parseOrderID(env.Data)
	if err != nil {
		return deadLetter(string(typ), eventID, err)
	}
	rev, err := data.revision()
	if err != nil {
		return deadLetter(string(typ), eventID, err)
	}
	if typ == mailtype.OrderCancelled {
		item := store.IngestItem{Cancel: &store.Cancel{EventID: eventID, OrderID: orderID, Revision: rev, Template: templates.OrderConfirmed}}
		return record(string(typ), eventID, item).at(*env.OccurredAt)
	}
	mail, err := d.confirmed(&env, eventID, orderID, rev, data)
	if err != nil {
		return deadLetter(string(typ), eventID, err)
	}
	return record(string(typ), eventID, store.IngestItem{Mail: mail}).at(*env.OccurredAt)
}

// at sets OccurredAt on a decision to record.
func (d Decision) at(occurred time.Time) Decision {
	if d.Action == ActionRecord {
		d.OccurredAt = occurred.UTC()
	}
	return d
}

// record is the decision to record item, or to dead-letter it when
// PostgreSQL could not store it as it is (a value text or jsonb cannot
// hold, such as a \u0000 in a field the consumer does not read). That is
// decided here, in Go, and only here: once an item is recorded, nothing the
// database answers makes it the event's fault.
func record(eventType, eventID string, item store.IngestItem) Decision {
	if err := item.Check(); err != nil {
		return deadLetter(eventType, eventID, asPermanent(err, mailtype.ReasonInvalidField))
	}
	return Decision{Action: ActionRecord, EventType: eventType, EventID: eventID, Item: item}
}

// confirmed validates an OrderConfirmed, renders its mail and applies the
// stale guard.
func (d *Decider) confirmed(env *envelope, eventID, orderID string, rev int, data *orderData) (*store.NewMail, *mailtype.Error) {
	if env.DedupeKey == nil {
		return nil, permanent(mailtype.ReasonMissingField, "dedupe_key is required")
	}
	if err := checkIdentifier("dedupe_key", *env.DedupeKey, maxKeyLen); err != nil {
		return nil, err
	}
	// The contract keys a confirmation by its order and revision, and an
	// OrderCancelled finds, or tombstones, exactly that key: a
	// confirmation keyed otherwise could slip past a cancel.
	if want := mailtype.ConfirmationKeyAt(orderID, rev); *env.DedupeKey != want {
		return nil, permanent(mailtype.ReasonInvalidField, "dedupe_key %q must be %q for an OrderConfirmed of revision %d", mailtype.Sanitize(*env.DedupeKey), want, rev)
	}
	if err := checkOrder(data); err != nil {
		return nil, err
	}
	if err := checkAttachments(data.Attachments, d.Attachments); err != nil {
		return nil, err
	}
	settings, err := d.Templates.Settings(templates.OrderConfirmed)
	if err != nil {
		return nil, asPermanent(err, mailtype.ReasonUnknownTemplate)
	}
	order := toOrder(orderID, data, env.OccurredAt.UTC())
	r, err := d.Templates.Render(templates.OrderConfirmed, data.Locale, order)
	if err != nil {
		return nil, asPermanent(err, mailtype.ReasonRender)
	}
	to := r.ToAddress
	if to == "" {
		to = order.Email
	}
	maxAge := d.MaxEventAge
	if settings.MaxEventAge > 0 {
		maxAge = settings.MaxEventAge
	}
	return &store.NewMail{
		EventID: eventID, DedupeKey: *env.DedupeKey, OrderID: orderID, Revision: rev, Template: templates.OrderConfirmed,
		Locale: r.Locale, ToEmail: to, Payload: env.Data,
		Subject: r.Subject, BodyText: r.Text, BodyHTML: r.HTML,
		MessageID: mailtype.MessageID(*env.DedupeKey, d.FromDomain),
		From:      d.From, ToName: r.ToName, ReplyTo: d.ReplyTo,
		IdempotencyKey: mailtype.IdempotencyKey(d.IdempotencyNamespace, *env.DedupeKey),
		OccurredAt:     order.OccurredAt, Stale: d.now().Sub(order.OccurredAt) > maxAge, MaxAge: maxAge,
		Lane: settings.Lane, HasAttachments: len(data.Attachments) > 0,
	}, nil
}

func toOrder(orderID string, d *orderData, occurred time.Time) templates.Order {
	o := templates.Order{
		OrderID: orderID, Email: *d.Email, CustomerName: d.CustomerName, Locale: d.Locale,
		Currency: *d.Currency, OccurredAt: occurred,
		Items: make([]templates.Item, len(d.Items)),
	}
	if d.Total != nil {
		o.Total = *d.Total
	}
	for i, it := range d.Items {
		o.Items[i] = templates.Item{SKU: it.SKU, Name: it.Name, Quantity: it.Quantity, UnitPrice: it.UnitPrice}
	}
	return o
}

// asPermanent keeps a template error's own reason when it is a permanent
// *mailtype.Error and otherwise files it under reason: a template that
// fails for one event's data fails for it on every delivery.
func asPermanent(err error, reason mailtype.Reason) *mailtype.Error {
	var me *mailtype.Error
	if errors.As(err, &me) && me.Class == mailtype.Permanent {
		return me
	}
	return mailtype.NewError(mailtype.Permanent, reason, err)
}

func deadLetter(eventType, eventID string, err *mailtype.Error) Decision {
	return Decision{Action: ActionDeadLetter, EventType: eventType, EventID: eventID, Err: err}
}

func (d *Decider) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// idForLog is the event_id in canonical form when it is a UUID, for log
// lines about an event refused for another reason; "" otherwise.
func idForLog(id *string) string {
	if id == nil {
		return ""
	}
	u, err := uuid.Parse(*id)
	if err != nil {
		return ""
	}
	return u.String()
}
