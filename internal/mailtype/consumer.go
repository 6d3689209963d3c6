package mailtype

// Disposition is what consuming one input event did: the label `outcome` of
// mailsvc_events_consumed_total (a name kept for existing dashboards) (docs/design.md, "Metrics"). The set is closed.
type Disposition string

// The dispositions of one input event.
const (
	// DispositionInserted: an OrderConfirmed created its pending mail.
	DispositionInserted Disposition = "inserted"
	// DispositionDuplicate: the event (same event_id) or its intent (same
	// dedupe_key) was already recorded, or a cancel found nothing left to
	// change; nothing was written.
	DispositionDuplicate Disposition = "duplicate"
	// DispositionTombstoned: an OrderCancelled arrived before its confirmation
	// and wrote a cancelled tombstone for the confirmation key.
	DispositionTombstoned Disposition = "tombstoned"
	// DispositionCancelled: an OrderCancelled turned a pending mail into
	// cancelled.
	DispositionCancelled Disposition = "cancelled"
	// DispositionTooLate: an OrderCancelled arrived while a mail was being sent
	// or after it was sent.
	DispositionTooLate Disposition = "too_late"
	// DispositionStale: an OrderConfirmed older than its max age was recorded as
	// failed (reason stale) and will not be sent.
	DispositionStale Disposition = "stale"
	// DispositionIgnored: an event type mailsvc does not handle (bound by a
	// wildcard) was acknowledged and dropped.
	DispositionIgnored Disposition = "ignored"
	// DispositionDeadLettered: a permanent error sent the message to the
	// dead-letter exchange.
	DispositionDeadLettered Disposition = "dead_lettered"
	// DispositionHeld: an OrderConfirmed over the per-recipient safety limit
	// (mail.recipient_limit) created its mail held: recorded, not sent
	// until an operator releases it.
	DispositionHeld Disposition = "held"
	// DispositionEventIDReused is a store result, never a final disposition: an
	// OrderConfirmed whose event_id an earlier event of another intent
	// (dedupe_key) already used. The consumer dead-letters it (reason
	// invalid_field) instead of taking it for a redelivery, which would
	// lose its mail without a word.
	DispositionEventIDReused Disposition = "event_id_reused"
)

// Dispositions lists every disposition, for pre-initialized metric labels.
var Dispositions = []Disposition{
	DispositionInserted, DispositionDuplicate, DispositionTombstoned, DispositionCancelled,
	DispositionTooLate, DispositionStale, DispositionIgnored, DispositionDeadLettered, DispositionHeld,
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
