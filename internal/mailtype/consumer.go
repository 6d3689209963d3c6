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
	// OutcomeHeld: an OrderConfirmed over the per-recipient safety limit
	// (mail.recipient_limit) created its mail held: recorded, not sent
	// until an operator releases it.
	OutcomeHeld Outcome = "held"
	// OutcomeEventIDReused is a store result, never a final outcome: an
	// OrderConfirmed whose event_id an earlier event of another intent
	// (dedupe_key) already used. The consumer dead-letters it (reason
	// invalid_field) instead of taking it for a redelivery, which would
	// lose its mail without a word.
	OutcomeEventIDReused Outcome = "event_id_reused"
)

// Outcomes lists every outcome, for pre-initialized metric labels.
var Outcomes = []Outcome{
	OutcomeInserted, OutcomeDuplicate, OutcomeTombstoned, OutcomeCancelled,
	OutcomeTooLate, OutcomeStale, OutcomeIgnored, OutcomeDeadLettered, OutcomeHeld,
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
