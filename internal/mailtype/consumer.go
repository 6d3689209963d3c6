package mailtype

// Outcome is what consuming one input event did: the outcome label of
// mailsvc_events_consumed_total (docs/design.md, "Metrics"). The set is closed.
type Outcome string

// The outcomes of one input event.
const (
	// OutcomeInserted: an OrderConfirmed created its pending mail.
	OutcomeInserted Outcome = "inserted"
	// OutcomeDuplicate: the event (same event_id) or its intent (same
	// dedupe_key) was already recorded, or a cancel found nothing left to
	// change; nothing was written.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeTombstoned: an OrderCancelled arrived before its confirmation
	// and wrote a cancelled tombstone for the confirmation key.
	OutcomeTombstoned Outcome = "tombstoned"
	// OutcomeCancelled: an OrderCancelled turned a pending mail into
	// cancelled.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeTooLate: an OrderCancelled arrived while a mail was being sent
	// or after it was sent.
	OutcomeTooLate Outcome = "too_late"
	// OutcomeStale: an OrderConfirmed older than its max age was recorded as
	// failed (reason stale) and will not be sent.
	OutcomeStale Outcome = "stale"
	// OutcomeIgnored: an event type mailsvc does not handle (bound by a
	// wildcard) was acknowledged and dropped.
	OutcomeIgnored Outcome = "ignored"
	// OutcomeDeadLettered: a permanent error sent the message to the
	// dead-letter exchange.
	OutcomeDeadLettered Outcome = "dead_lettered"
)

// Outcomes lists every outcome, for pre-initialized metric labels.
var Outcomes = []Outcome{
	OutcomeInserted, OutcomeDuplicate, OutcomeTombstoned, OutcomeCancelled,
	OutcomeTooLate, OutcomeStale, OutcomeIgnored, OutcomeDeadLettered,
}

// DeadLetterReasons lists the reasons the consumer dead-letters a message
// with (docs/design.md, "Error classes": consumer, permanent), plus
// ReasonDeliveryLimit, the reason RabbitMQ itself gives in x-death when a
// quorum queue's x-delivery-limit is exceeded.
var DeadLetterReasons = []Reason{
	ReasonMalformedJSON, ReasonMissingField, ReasonInvalidField, ReasonUnsupportedVersion,
	ReasonInvalidAddress, ReasonTooLarge, ReasonMessageIDMismatch, ReasonUnknownTemplate,
	ReasonRender, ReasonDeliveryLimit,
}

// Headers the consumer adds to a message it publishes to the dead-letter
// exchange. The message keeps its body, its properties and its original
// headers; `mailsvc dlq replay` reads HeaderOriginalRoutingKey to send it
// back. A message RabbitMQ dead-lettered by itself (delivery limit) has
// none of these and carries the standard x-death header instead.
const (
	// HeaderErrorClass is the error class, always "permanent".
	HeaderErrorClass = "x-mailsvc-error-class"
	// HeaderErrorReason is one of DeadLetterReasons.
	HeaderErrorReason = "x-mailsvc-error-reason"
	// HeaderError is the error text, sanitized (no addresses, no control
	// characters, at most MaxErrorText bytes).
	HeaderError = "x-mailsvc-error"
	// HeaderDeadLetteredAt is when the consumer dead-lettered the message,
	// RFC 3339 in UTC.
	HeaderDeadLetteredAt = "x-mailsvc-dead-lettered-at"
	// HeaderOriginalExchange is the exchange the message was published to.
	HeaderOriginalExchange = "x-mailsvc-original-exchange"
	// HeaderOriginalRoutingKey is the routing key the message was
	// published with.
	HeaderOriginalRoutingKey = "x-mailsvc-original-routing-key"
	// HeaderRedelivered is true when the dead-lettered delivery was itself
	// a redelivery (it should be false: poison goes on first delivery).
	HeaderRedelivered = "x-mailsvc-redelivered"
)
