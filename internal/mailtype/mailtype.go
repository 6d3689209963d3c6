// Package mailtype holds the domain words every part of mailsvc shares: the
// status of a mail, the event types it consumes and emits, and the closed
// classification of errors (class and reason) that drives retries,
// dead-letter headers and metric labels. It imports only the standard library.
package mailtype

import "strconv"

// Status is the state of a row in table mail (docs/design.md, "State machine").
type Status string

// The seven states of a mail. Terminal states are Sent, Failed and
// Cancelled; Unknown is terminal until an operator reconciles it. Held is
// a mail over the per-recipient safety limit (mail.recipient_limit): never
// claimed, until an operator releases it (pending) or cancels it.
const (
	StatusPending   Status = "pending"
	StatusSending   Status = "sending"
	StatusSent      Status = "sent"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	StatusUnknown   Status = "unknown"
	StatusHeld      Status = "held"
)

// Statuses lists every status, in the order dashboards show them.
var Statuses = []Status{StatusPending, StatusSending, StatusSent, StatusFailed, StatusCancelled, StatusUnknown, StatusHeld}

// EventType is the event_type field of an input or output event.
type EventType string

// Input event types (docs/contract.md, "Input").
const (
	OrderConfirmed EventType = "OrderConfirmed"
	OrderCancelled EventType = "OrderCancelled"
)

// Output event types, published on mail.events (docs/contract.md, "Output").
const (
	EmailSent          EventType = "EmailSent"
	EmailFailed        EventType = "EmailFailed"
	EmailCancelled     EventType = "EmailCancelled"
	EmailCancelTooLate EventType = "EmailCancelTooLate"
	EmailUnknown       EventType = "EmailUnknown"
)

// Provider feedback event types, published on mail.events when the
// provider reports, after accepting a mail, what became of it (Resend's
// webhooks email.delivered, email.bounced, email.complained;
// docs/contract.md, "Provider feedback"). They follow the mail's EmailSent
// and are not delivery outcome events: the mail stays sent.
const (
	EmailDelivered  EventType = "EmailDelivered"
	EmailBounced    EventType = "EmailBounced"
	EmailComplained EventType = "EmailComplained"
)

// OutputEventTypes lists every event type mailsvc publishes.
var OutputEventTypes = []EventType{EmailSent, EmailFailed, EmailCancelled, EmailCancelTooLate, EmailUnknown,
	EmailDelivered, EmailBounced, EmailComplained}

// RoutingKey returns the routing key an output event is published with on
// mail.events, or "" for an event type mailsvc does not publish.
func (t EventType) RoutingKey() string {
	switch t {
	case EmailSent:
		return "email.sent"
	case EmailFailed:
		return "email.failed"
	case EmailCancelled:
		return "email.cancelled"
	case EmailCancelTooLate:
		return "email.cancel_too_late"
	case EmailUnknown:
		return "email.unknown"
	case EmailDelivered:
		return "email.delivered"
	case EmailBounced:
		return "email.bounced"
	case EmailComplained:
		return "email.complained"
	}
	return ""
}

// TemplateCancelNotice is the template of the cancellation notice: the
// mail a customer gets when an order is cancelled after its confirmation
// was, or may have been, delivered.
const TemplateCancelNotice = "order_cancelled"

// ConfirmationKey returns the dedupe key of the confirmation mail of an order,
// the key an OrderCancelled cancels or tombstones (docs/contract.md, "Input").
func ConfirmationKey(orderID string) string { return ConfirmationKeyAt(orderID, 1) }

// ConfirmationKeyAt returns the dedupe key of the confirmation of revision
// revision of an order (data.revision of the input events, 1 when absent):
// "order-confirmed:{order_id}" for revision 1, as before revisions
// existed, and "order-confirmed:{order_id}:r{revision}" after it, so that a
// reopened order is confirmed again under a key no tombstone of an earlier
// revision holds.
func ConfirmationKeyAt(orderID string, revision int) string {
	return revisionKey("order-confirmed:", orderID, revision)
}

// CancelNoticeKey returns the dedupe key of the cancellation notice of
// revision revision of an order: "order-cancelled:{order_id}", with the
// same ":r{revision}" suffix as ConfirmationKeyAt after revision 1. One
// notice per revision at most.
func CancelNoticeKey(orderID string, revision int) string {
	return revisionKey("order-cancelled:", orderID, revision)
}

func revisionKey(prefix, orderID string, revision int) string {
	if revision <= 1 {
		return prefix + orderID
	}
	return prefix + orderID + ":r" + strconv.Itoa(revision)
}
