// Package deadletter owns dead-lettering: the headers a dead-lettered
// message carries, the copy the consumer publishes to the dead-letter
// exchange for a poison message, how the origin and the reason of a
// dead-lettered message are read back (from those headers, or from the
// x-death header RabbitMQ writes when it dead-letters by itself), and the
// replay that `mailsvc dlq replay` runs (docs/design.md, "Error classes";
// docs/architecture.md, "From delivery to row", step 5). It speaks AMQP
// through internal/broker only.
package deadletter

// Headers the consumer adds to a message it publishes to the dead-letter
// exchange. The message keeps its body, its properties and its original
// headers; a replay reads HeaderOriginalRoutingKey to send it back. A
// message RabbitMQ dead-lettered by itself (delivery limit) has none of
// these and carries the standard x-death header instead.
const (
	// HeaderErrorClass is the error class, always "permanent".
	HeaderErrorClass = "x-mailsvc-error-class"
	// HeaderErrorReason is one of mailtype.DeadLetterReasons.
	HeaderErrorReason = "x-mailsvc-error-reason"
	// HeaderError is the error text, sanitized (mailtype.Sanitize: no
	// addresses, no control characters, at most mailtype.MaxErrorText
	// bytes).
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

// HeaderReplays counts how many times a replay sent a message back to the
// input exchange.
const HeaderReplays = "x-mailsvc-replays"

// LegacyOriginalRoutingKeyHeader is also read for the original routing
// key, for messages dead-lettered by other tools.
const LegacyOriginalRoutingKeyHeader = "x-original-routing-key"

// BindingKey binds a dead-letter queue to every routing key: a
// dead-lettered message keeps its original routing key, which a replay
// uses to send it back.
const BindingKey = "#"

// QueueDeliveryLimit is the x-delivery-limit of the dead-letter queue
// (a quorum queue): high enough that replays and dry runs never reach it.
// Without it RabbitMQ 4.x applies its default of 20, and every dry run
// (which returns what it read) counts a delivery: the 20th would drop
// dead-lettered messages, since the dead-letter queue has no dead-letter
// target of its own. Explicit, so 3.10 and 4.x agree.
const QueueDeliveryLimit = 1_000_000
