// Package feedback encodes mailsvc's feedback events, the output half of
// the published contract (../asyncapi.yaml, the schemas email-*.json and
// mail-event.json under ../schemas): the one place where the body of an
// EmailSent, EmailFailed, EmailCancelled, EmailCancelTooLate,
// EmailUnknown, EmailDelivered, EmailBounced or EmailComplained is
// written. The store calls New when it records an outcome and writes the
// Message to its outbox in the same transaction; the relay publishes the
// bytes as they were written. Its tests validate every event type against
// the published schemas (package api).
//
// One field is not written here: data.omitted_attachments of an EmailSent,
// which the store's insert statement adds from the mail's attachment rows
// in the same statement (internal/store, omittedAttachmentsSQL).
//
// It imports only the standard library, google/uuid and mailtype, so the
// store can use it without the schema validators.
package feedback

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Version is the envelope's version of every feedback event
// (common.json#/$defs/version).
const Version = 1

// Event is one feedback event (docs/contract.md, "Output"), as the code
// that records an outcome states it. It never carries a recipient address
// or a secret.
type Event struct {
	Type      mailtype.EventType
	DedupeKey string
	OrderID   string
	// Revision is the order revision of the mail (>= 1; 0 is taken as 1).
	Revision          int
	Template          string
	Status            mailtype.Status
	Attempts          int
	Provider          string
	ProviderMessageID string
	// SourceEventID is the input event that caused this outcome, if any;
	// "" leaves data.source_event_id out.
	SourceEventID string
	// ErrorClass, ErrorReason and Error are set for failures; Error must
	// already be sanitized (mailtype.Sanitize). Each key is left out when
	// its value is "".
	ErrorClass  mailtype.Class
	ErrorReason mailtype.Reason
	Error       string
	// Detail is the provider's detail of the failure, published as
	// data.provider_detail; the key is left out when Detail is zero.
	Detail mailtype.ProviderDetail
	// ProviderEvent is what the provider reported after accepting the
	// mail, published as data.provider_event by EmailDelivered,
	// EmailBounced and EmailComplained (and an EmailFailed or EmailSent
	// that a report caused); nil (the key left out) otherwise.
	ProviderEvent *ProviderEvent
	// FailoverFrom is the primary provider when Provider is the fallback
	// that took the mail (sender.fallback_provider), published as
	// data.failover_from; "" (the key left out) otherwise.
	FailoverFrom string
	// ReconciledBy is "provider_evidence" on the events of an `unknown`
	// mail that a provider's report settled (its EmailSent and the
	// report's own event), published as data.reconciled_by; "" (the key
	// left out) otherwise.
	ReconciledBy string
	// TraceContext is not part of the body: it is the stored trace context
	// (tracing.Encode) of the span that wrote the event, which the store
	// writes to outbox.trace_context and the relay's publish span
	// continues (the traceparent and tracestate headers, asyncapi.yaml
	// FeedbackHeaders). "" (NULL) for none.
	TraceContext string
}

// ProviderEvent is one report a provider made about a mail it had accepted
// (a webhook), as data.provider_event publishes it (docs/contract.md,
// "Provider feedback").
type ProviderEvent struct {
	// WebhookID is the provider's id of the webhook message (Resend:
	// svix-id), the same on every redelivery of it.
	WebhookID string `json:"webhook_id"`
	// Type is the provider's event type, e.g. "email.bounced".
	Type string `json:"type"`
	// At is when the provider recorded the event (Resend: created_at), UTC.
	At time.Time `json:"at"`
	// BounceType is permanent, transient or undetermined for an
	// EmailBounced; "" otherwise.
	BounceType string `json:"bounce_type,omitempty"`
	// BounceSubtype is the provider's finer kind of bounce (Resend's
	// bounce.subType, e.g. "Suppressed", "General"), "" when it gave none.
	BounceSubtype string `json:"bounce_subtype,omitempty"`
	// Reason is the provider's own word for a failure or a suppression
	// (Resend's failed.reason, e.g. "reached_daily_quota", or
	// suppressed.reason, e.g. "previous_bounce"), "" when it gave none.
	Reason string `json:"reason,omitempty"`
}

// Message is an encoded event with the properties it is published with
// (asyncapi.yaml: message_id = event_id, type = event_type, the routing
// key of its type, the timestamp = occurred_at).
type Message struct {
	// ID is the event_id, a UUIDv7 made when the event was encoded, so a
	// re-publish carries the same id.
	ID uuid.UUID
	// RoutingKey is the routing key of Type on mail.events.
	RoutingKey string
	// Type is the event type, the AMQP type property.
	Type mailtype.EventType
	// At is occurred_at, UTC.
	At time.Time
	// Body is the JSON body (Encode).
	Body []byte
}

// New encodes e as a message with a fresh UUIDv7 event id, occurring now.
func New(e Event) (Message, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Message{}, fmt.Errorf("new event id: %w", err)
	}
	now := time.Now().UTC()
	body, err := Encode(id, now, e)
	if err != nil {
		return Message{}, err
	}
	return Message{ID: id, RoutingKey: e.Type.RoutingKey(), Type: e.Type, At: now, Body: body}, nil
}

// Encode returns the JSON body of e with event id id, occurring at at (use
// UTC): the envelope of mail-event.json#/$defs/envelope and its data,
// with each optional key left out when its field is unset (see Event). It
// fails only when e cannot be encoded as JSON.
func Encode(id uuid.UUID, at time.Time, e Event) ([]byte, error) {
	env := envelope{
		EventID: id.String(), EventType: string(e.Type), Version: Version, OccurredAt: at, DedupeKey: e.DedupeKey,
		Data: Data{
			OrderID: e.OrderID, Revision: max(e.Revision, 1), Template: e.Template, Status: string(e.Status), Attempts: e.Attempts,
			Provider: e.Provider, ProviderMessageID: e.ProviderMessageID, SourceEventID: e.SourceEventID,
			ErrorClass: string(e.ErrorClass), ErrorReason: string(e.ErrorReason), Error: e.Error,
			ProviderEvent: e.ProviderEvent, FailoverFrom: e.FailoverFrom, ReconciledBy: e.ReconciledBy,
		},
	}
	if !e.Detail.IsZero() {
		d := e.Detail
		env.Data.ProviderDetail = &d
	}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode feedback %s: %w", e.Type, err)
	}
	return body, nil
}

// envelope is the body published on mail.events, its keys in the order
// written since version 1.
type envelope struct {
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	Version    int       `json:"version"`
	OccurredAt time.Time `json:"occurred_at"`
	DedupeKey  string    `json:"dedupe_key"`
	Data       Data      `json:"data"`
}

// Data is the data object of a feedback body as published
// (mail-event.json#/$defs/data, without omitted_attachments): Encode
// writes it from an Event, and a reader of a stored body (the store's
// timeline of a mail) decodes it.
type Data struct {
	OrderID           string `json:"order_id"`
	Revision          int    `json:"revision"`
	Template          string `json:"template"`
	Status            string `json:"status"`
	Attempts          int    `json:"attempts"`
	Provider          string `json:"provider"`
	ProviderMessageID string `json:"provider_message_id"`
	SourceEventID     string `json:"source_event_id,omitempty"`
	ErrorClass        string `json:"error_class,omitempty"`
	ErrorReason       string `json:"error_reason,omitempty"`
	Error             string `json:"error,omitempty"`
	// ProviderDetail is nil, and the key left out, when there is no detail.
	ProviderDetail *mailtype.ProviderDetail `json:"provider_detail,omitempty"`
	// ProviderEvent is nil, and the key left out, but for provider feedback.
	ProviderEvent *ProviderEvent `json:"provider_event,omitempty"`
	FailoverFrom  string         `json:"failover_from,omitempty"`
	ReconciledBy  string         `json:"reconciled_by,omitempty"`
}
