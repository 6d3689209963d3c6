package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Feedback is one output event (docs/contract.md, "Output") to be written to the
// outbox in the same transaction as the state change it reports. It never
// carries a recipient address or a secret.
type Feedback struct {
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
	// SourceEventID is the input event that caused this outcome, if any.
	SourceEventID string
	// ErrorClass, ErrorReason and Error are set for failures; Error must
	// already be sanitized (mailtype.Sanitize).
	ErrorClass  mailtype.Class
	ErrorReason mailtype.Reason
	Error       string
	// Detail is the provider's detail of the failure, published as
	// data.provider_detail; the key is left out when Detail is zero.
	Detail mailtype.ProviderDetail
	// ProviderEvent is what the provider reported after accepting the
	// mail, published as data.provider_event by EmailDelivered,
	// EmailBounced and EmailComplained; nil (the key left out) otherwise.
	ProviderEvent *ProviderEvent
	// FailoverFrom is the primary provider when Provider is the fallback
	// that took the mail (sender.fallback_provider), published as
	// data.failover_from; "" (the key left out) otherwise.
	FailoverFrom string
	// ReconciledBy is ReconciledByEvidence on the events of an `unknown`
	// mail that a provider's report settled (its EmailSent and the
	// report's own event), published as data.reconciled_by; "" (the key
	// left out) otherwise.
	ReconciledBy string
	// TraceContext is the stored trace context (tracing.Encode) of the
	// span that wrote the event, written to outbox.trace_context: the
	// relay's publish span continues it. "" (NULL) for none.
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
	// EmailBounced (BouncePermanent, ...); "" otherwise.
	BounceType string `json:"bounce_type,omitempty"`
	// BounceSubtype is the provider's finer kind of bounce (Resend's
	// bounce.subType, e.g. "Suppressed", "General"), "" when it gave none.
	BounceSubtype string `json:"bounce_subtype,omitempty"`
	// Reason is the provider's own word for a failure or a suppression
	// (Resend's failed.reason, e.g. "reached_daily_quota", or
	// suppressed.reason, e.g. "previous_bounce"), "" when it gave none.
	Reason string `json:"reason,omitempty"`
}

// feedbackEnvelope is the JSON body published on mail.events.
type feedbackEnvelope struct {
	EventID    string       `json:"event_id"`
	EventType  string       `json:"event_type"`
	Version    int          `json:"version"`
	OccurredAt time.Time    `json:"occurred_at"`
	DedupeKey  string       `json:"dedupe_key"`
	Data       feedbackData `json:"data"`
}

type feedbackData struct {
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

// insertOutboxSQL takes the payload ($7) as text: in the exec and
// simple_protocol query modes a []byte argument goes over as bytea, which
// jsonb refuses.
const insertOutboxSQL = `
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, created_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, nullif($9, ''))`

// insertOutboxManySQL writes many outbox rows in one statement (one
// executor run, one firing of the statement trigger that notifies the
// relay), in the order of the arrays.
const insertOutboxManySQL = `
INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, created_at, trace_context)
SELECT e, $2, rk, et, o, k,
       CASE WHEN om.names IS NULL THEN p::jsonb ELSE jsonb_set(p::jsonb, '{data,omitted_attachments}', om.names) END,
       c, nullif(tc, '')
FROM unnest($1::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[])
    AS u(e, rk, et, o, k, p, c, tc)
LEFT JOIN LATERAL (` + omittedAttachmentsSQL + `) om ON true`

// outboxRow is the outbox row of one feedback event, addressed to the
// store's events exchange.
type outboxRow struct {
	eventID                                   uuid.UUID
	routingKey, eventType, orderID, dedupeKey string
	payload                                   string // the JSON envelope
	createdAt                                 time.Time
	traceContext                              string
}

// outboxRowOf encodes f as its outbox row. The event_id is a fresh
// UUIDv7, made now (not at publish), so a re-publish carries the same id.
func outboxRowOf(f Feedback) (outboxRow, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return outboxRow{}, fmt.Errorf("new event id: %w", err)
	}
	now := time.Now().UTC()
	env := feedbackEnvelope{
		EventID: id.String(), EventType: string(f.Type), Version: 1, OccurredAt: now, DedupeKey: f.DedupeKey,
		Data: feedbackData{
			OrderID: f.OrderID, Revision: revisionOr1(f.Revision), Template: f.Template, Status: string(f.Status), Attempts: f.Attempts,
			Provider: f.Provider, ProviderMessageID: f.ProviderMessageID, SourceEventID: f.SourceEventID,
			ErrorClass: string(f.ErrorClass), ErrorReason: string(f.ErrorReason), Error: f.Error,
			ProviderEvent: f.ProviderEvent, FailoverFrom: f.FailoverFrom, ReconciledBy: f.ReconciledBy,
		},
	}
	if !f.Detail.IsZero() {
		d := f.Detail
		env.Data.ProviderDetail = &d
	}
	body, err := json.Marshal(env)
	if err != nil {
		return outboxRow{}, fmt.Errorf("encode feedback: %w", err)
	}
	return outboxRow{eventID: id, routingKey: f.Type.RoutingKey(), eventType: string(f.Type), orderID: f.OrderID,
		dedupeKey: f.DedupeKey, payload: string(body), createdAt: now, traceContext: f.TraceContext}, nil
}

// insertFeedback writes f as an outbox row inside tx. The caller commits.
func (s *Store) insertFeedback(ctx context.Context, tx dbtx, f Feedback) error {
	r, err := outboxRowOf(f)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, insertOutboxSQL, r.eventID, s.eventsExchange, r.routingKey, r.eventType, r.orderID, r.dedupeKey, r.payload, r.createdAt, r.traceContext)
	if err != nil {
		return fmt.Errorf("insert outbox %s: %w", f.Type, interpretError(err))
	}
	return nil
}

// insertFeedbacks writes fs as outbox rows inside tx, in their order, with
// one statement (insertOutboxManySQL) whatever their number. The caller
// commits.
func (s *Store) insertFeedbacks(ctx context.Context, tx dbtx, fs []Feedback) error {
	if len(fs) == 0 {
		return nil
	}
	args, err := s.outboxArgs(fs)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, insertOutboxManySQL, args...); err != nil {
		return fmt.Errorf("insert %d outbox rows: %w", len(fs), interpretError(err))
	}
	return nil
}

// outboxArgs are insertOutboxManySQL's arguments for fs.
func (s *Store) outboxArgs(fs []Feedback) ([]any, error) {
	n := len(fs)
	// The ids go as text: in the simple_protocol query mode pgx cannot
	// encode a []uuid.UUID.
	ids := make([]string, n)
	keys, types, orders, dedupe, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	created, traces := make([]time.Time, n), make([]string, n)
	for i, f := range fs {
		r, err := outboxRowOf(f)
		if err != nil {
			return nil, err
		}
		ids[i], keys[i], types[i], orders[i], dedupe[i], payloads[i], created[i], traces[i] =
			r.eventID.String(), r.routingKey, r.eventType, r.orderID, r.dedupeKey, r.payload, r.createdAt, r.traceContext
	}
	return []any{ids, s.eventsExchange, keys, types, orders, dedupe, payloads, created, traces}, nil
}
