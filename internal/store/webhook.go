package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// WebhookEffect is what a verified provider webhook changes.
type WebhookEffect int

// The effects of a webhook (docs/contract.md, "Provider feedback").
const (
	// EffectNone records the webhook and changes nothing else: an event
	// type mailsvc does not act on, or a bounce that is not permanent.
	EffectNone WebhookEffect = iota
	// EffectDelivered sets the mail's delivered_at (once) and writes
	// EmailDelivered.
	EffectDelivered
	// EffectBounced suppresses the recipients (source webhook/bounce) and
	// writes EmailBounced.
	EffectBounced
	// EffectComplained suppresses the recipients (source
	// webhook/complaint) and writes EmailComplained.
	EffectComplained
)

// Webhook is one verified provider webhook, to be recorded once by its id.
type Webhook struct {
	// Provider names the provider ("resend"), as the mails' provider column
	// does.
	Provider string
	// ID is the provider's webhook message id (Resend: svix-id): the same
	// on every redelivery, so it makes the record idempotent.
	ID string
	// Type is the provider's event type ("email.bounced").
	Type string
	// At is when the provider recorded the event.
	At time.Time
	// EmailID is the provider's id of the mail (Resend: data.email_id),
	// matched against provider_message_id of the mails it accepted.
	EmailID string
	Effect  WebhookEffect
	// Recipients are the addresses a bounce or a complaint suppresses, as
	// the provider gave them (compared normalised); invalid ones are
	// skipped (ErrInvalidAddress).
	Recipients []string
	// Reason is kept with each new suppression entry.
	Reason string
	// BounceType and BounceSubtype go to the EmailBounced's provider_event.
	BounceType, BounceSubtype string
}

// WebhookResult is what RecordWebhook did.
type WebhookResult struct {
	// Duplicate is true when the webhook's id was recorded before: nothing
	// was changed.
	Duplicate bool
	// Matched counts the mails the webhook names (provider and
	// provider_message_id).
	Matched int
	// Suppressed counts the addresses this webhook added to the list.
	Suppressed int
	// Events are the feedback events written, in order.
	Events []mailtype.EventType
}

const recordWebhookSQL = `
INSERT INTO webhook_event (provider, webhook_id, event_type) VALUES ($1, $2, $3)
ON CONFLICT (provider, webhook_id) DO NOTHING`

// mailsOfMessageSQL locks the mails a webhook names: the partial index
// mail_resend_message_id_idx answers it for Resend.
const mailsOfMessageSQL = `
SELECT id, dedupe_key, order_id, template, COALESCE(event_id::text, ''), sends, revision, status,
    delivered_at IS NOT NULL, COALESCE(trace_context, ''), to_email
FROM mail WHERE provider = $1 AND provider_message_id = $2 AND $2 <> ''
ORDER BY id FOR UPDATE`

// webhookMail is one mail a webhook names; its fb carries the mail's
// stored trace context, so the provider's report is published in the
// trace of the event that asked for the mail.
type webhookMail struct {
	id        int64
	fb        Feedback
	delivered bool
	// to is the recipient the mail was sent to, as stored: a bounce or a
	// complaint suppresses it too, whatever spelling the provider reports.
	to string
}

// RecordWebhook records w in one transaction, once per (provider, id): a
// webhook seen before is a Duplicate and changes nothing. Otherwise, by
// w.Effect: a delivery sets delivered_at = w.At on each named mail that
// has none and writes its EmailDelivered; a bounce or a complaint adds
// every valid recipient (those it names, and the stored recipient of each
// mail it names) to the suppression list and writes EmailBounced or
// EmailComplained for each named mail. Each event goes to the outbox in
// the same transaction (published by the relay). A webhook that names no
// mail still suppresses its recipients. An error return means nothing was
// committed (a transient *mailtype.Error, ReasonDatabase): the caller
// answers so that the provider redelivers.
func (s *Store) RecordWebhook(ctx context.Context, w Webhook) (WebhookResult, error) {
	var res WebhookResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = WebhookResult{}
		tag, err := tx.Exec(ctx, recordWebhookSQL, w.Provider, w.ID, w.Type)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			res.Duplicate = true
			return nil
		}
		if w.Effect == EffectNone {
			return nil
		}
		mails, err := mailsOfMessage(ctx, tx, w)
		if err != nil {
			return err
		}
		res.Matched = len(mails)
		for _, m := range mails {
			w.Recipients = append(w.Recipients, m.to)
		}
		if res.Suppressed, err = suppressRecipients(ctx, tx, w); err != nil {
			return err
		}
		fbs, err := webhookFeedback(ctx, tx, w, mails)
		if err != nil {
			return err
		}
		for _, f := range fbs {
			res.Events = append(res.Events, f.Type)
		}
		return s.insertFeedbacks(ctx, tx, fbs)
	})
	if err != nil {
		return WebhookResult{}, fmt.Errorf("record %s webhook %s: %w", w.Provider, w.Type, interpretError(err))
	}
	return res, nil
}

func mailsOfMessage(ctx context.Context, tx pgx.Tx, w Webhook) ([]webhookMail, error) {
	rows, err := tx.Query(ctx, mailsOfMessageSQL, w.Provider, w.EmailID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookMail, error) {
		var m webhookMail
		err := r.Scan(&m.id, &m.fb.DedupeKey, &m.fb.OrderID, &m.fb.Template, &m.fb.SourceEventID, &m.fb.Attempts,
			&m.fb.Revision, &m.fb.Status, &m.delivered, &m.fb.TraceContext, &m.to)
		return m, err
	})
}

// suppressRecipients adds w's valid recipients for a bounce or a
// complaint and returns how many were new.
func suppressRecipients(ctx context.Context, tx pgx.Tx, w Webhook) (int, error) {
	source := SourceBounce
	switch w.Effect {
	case EffectBounced:
	case EffectComplained:
		source = SourceComplaint
	default:
		return 0, nil
	}
	// In one order, so that two webhooks naming the same addresses never
	// wait on each other's inserts in opposite orders (a deadlock).
	recipients := slices.Sorted(slices.Values(w.Recipients))
	n := 0
	for _, a := range recipients {
		if checkAddress(a) != nil {
			continue
		}
		added, err := suppress(ctx, tx, a, w.Reason, source)
		if err != nil {
			return n, err
		}
		if added {
			n++
		}
	}
	return n, nil
}

// webhookFeedback marks deliveries and returns the events w writes for
// mails.
func webhookFeedback(ctx context.Context, tx pgx.Tx, w Webhook, mails []webhookMail) ([]Feedback, error) {
	pe := &ProviderEvent{WebhookID: w.ID, Type: w.Type, At: w.At.UTC()}
	var typ mailtype.EventType
	switch w.Effect {
	case EffectDelivered:
		typ = mailtype.EmailDelivered
	case EffectBounced:
		typ, pe.BounceType, pe.BounceSubtype = mailtype.EmailBounced, w.BounceType, w.BounceSubtype
	case EffectComplained:
		typ = mailtype.EmailComplained
	default:
		return nil, nil
	}
	var out []Feedback
	for _, m := range mails {
		if w.Effect == EffectDelivered {
			if m.delivered {
				continue // a second report of the same delivery
			}
			if _, err := tx.Exec(ctx, `UPDATE mail SET delivered_at = $2, updated_at = now() WHERE id = $1`, m.id, w.At); err != nil {
				return nil, err
			}
		}
		f := m.fb
		f.Type, f.Provider, f.ProviderMessageID, f.ProviderEvent = typ, w.Provider, w.EmailID, pe
		out = append(out, f)
	}
	return out, nil
}

// deleteOldWebhooksSQL deletes at most $2 webhook ids recorded before $1,
// oldest first, through the received_at index.
const deleteOldWebhooksSQL = `
DELETE FROM webhook_event WHERE (provider, webhook_id) IN (
    SELECT provider, webhook_id FROM webhook_event WHERE received_at < now() - $1::interval
    ORDER BY received_at LIMIT $2)`

// DeleteOldWebhooks forgets at most limit webhook ids recorded more than
// window ago (database clock) and returns how many it deleted. A provider
// redelivers a webhook for a day or so at most, so a window of days keeps
// every redelivery a Duplicate.
func (s *Store) DeleteOldWebhooks(ctx context.Context, window time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteOldWebhooksSQL, window, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old webhook ids: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}
