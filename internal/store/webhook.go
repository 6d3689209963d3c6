package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// WebhookEffect is what a verified provider webhook changes.
type WebhookEffect int

// The effects of a webhook (docs/contract.md, "What the order service
// hears after EmailSent"). Each acts on the mails the webhook names, and
// only on them (Webhook.EmailID); a bounce, complaint or provider
// suppression suppresses the named mails' own recipients, never an
// address the report alone gives, unless the store's scope is the whole
// provider account (Options.AccountSuppression).
const (
	// EffectNone records the webhook and changes nothing else: an event
	// type that says nothing about delivery (sent, opened, ...).
	EffectNone WebhookEffect = iota
	// EffectDelivered sets the mail's delivered_at (once) and writes
	// EmailDelivered.
	EffectDelivered
	// EffectDelayed sets the mail's delivery_delayed_at: the provider is
	// still trying. Nothing is published.
	EffectDelayed
	// EffectBounced makes a sent mail failed and writes EmailBounced; a
	// permanent bounce also suppresses the recipient (source
	// webhook/bounce). Transient and undetermined ones suppress nothing.
	EffectBounced
	// EffectComplained suppresses the recipient (source webhook/complaint)
	// and writes EmailComplained; the mail was delivered and stays sent.
	EffectComplained
	// EffectFailed makes a sent mail failed (reason provider_failed) and
	// writes EmailFailed: the provider accepted the mail, then did not
	// send it (e.g. its daily quota was reached).
	EffectFailed
	// EffectSuppressed makes a sent mail failed (reason suppressed) and
	// writes EmailFailed: the provider did not send it because the address
	// is on its suppression list; mailsvc suppresses it too.
	EffectSuppressed
)

// The bounce types of EffectBounced (Resend's bounce.type, lower-cased).
const (
	BouncePermanent    = "permanent"
	BounceTransient    = "transient"
	BounceUndetermined = "undetermined"
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
	// Recipients are the addresses the report names. They are suppressed
	// only when the report names no mail of this deployment and the scope
	// is the whole account; invalid ones are skipped.
	Recipients []string
	// Reason is kept with each new suppression entry and as the mail's
	// last_error.
	Reason string
	// BounceType (BouncePermanent, ...) and BounceSubtype go to the
	// EmailBounced's provider_event.
	BounceType, BounceSubtype string
	// ProviderReason is the provider's word for a failure or a suppression
	// (provider_event.reason).
	ProviderReason string
	// MailID, when set, names the mail by its id instead of EmailID: a
	// delivery status notification to its VERP address (internal/bounce).
	MailID int64
	// MailTag is the value of the mail's mailtype.ReportTagName tag that
	// the report carries back (Resend: data.tags), "" for none. It names a
	// mail only when EmailID names none: one whose email id mailsvc never
	// got, an `unknown` mail (mailsOfTag).
	MailTag string
}

// suppresses reports whether w puts addresses on the suppression list,
// and with which source.
func (w Webhook) suppresses() (SuppressionSource, bool) {
	switch {
	case w.Effect == EffectBounced && w.BounceType == BouncePermanent && w.MailID != 0:
		return SourceDSN, true
	case w.Effect == EffectBounced && w.BounceType == BouncePermanent:
		return SourceBounce, true
	case w.Effect == EffectComplained:
		return SourceComplaint, true
	case w.Effect == EffectSuppressed && w.ProviderReason == "previous_complaint":
		return SourceComplaint, true
	case w.Effect == EffectSuppressed:
		return SourceBounce, true
	}
	return "", false
}

// WebhookResult is what RecordWebhook did.
type WebhookResult struct {
	// Duplicate is true when the webhook's id was recorded before: nothing
	// was changed.
	Duplicate bool
	// Matched counts the mails the webhook names (provider and
	// provider_message_id, a VERP mail id, or a report tag).
	Matched int
	// Reconciled counts the `unknown` mails the webhook settled
	// (reconciliation by provider evidence).
	Reconciled int
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
    delivered_at IS NOT NULL, COALESCE(trace_context, ''), to_email, COALESCE(provider, ''), COALESCE(provider_message_id, ''),
    complained_at IS NOT NULL
FROM mail WHERE provider = $1 AND provider_message_id = $2 AND $2 <> ''
ORDER BY id FOR UPDATE`

// mailOfIDSQL locks the mail a VERP report names by its id, if the
// report's provider sent it: an SMTP report changes no mail Resend sent.
// A mail still sending has no provider until its outcome is written; a
// fast relay's report about it is matched too, and asked again later
// (reportedTooEarly), not dropped as unmatched: the evidence that would
// settle the mail, should the send end unknown, is not lost.
const mailOfIDSQL = `
SELECT id, dedupe_key, order_id, template, COALESCE(event_id::text, ''), sends, revision, status,
    delivered_at IS NOT NULL, COALESCE(trace_context, ''), to_email, COALESCE(provider, ''), COALESCE(provider_message_id, ''),
    complained_at IS NOT NULL
FROM mail WHERE id = $1 AND (provider = $2 OR (provider IS NULL AND status = 'sending')) FOR UPDATE`

// webhookMail is one mail a webhook names; its fb carries the mail's
// stored trace context, so the provider's report is published in the
// trace of the event that asked for the mail.
type webhookMail struct {
	id        int64
	fb        Feedback
	delivered bool
	// complained is true once a complaint was recorded: one
	// EmailComplained per mail.
	complained bool
	// to is the recipient the mail was sent to, as stored: a bounce or a
	// complaint suppresses it too, whatever spelling the provider reports.
	to string
	// early is true for a mail named by its report tag whose outcome is
	// not written yet (mailsOfTag): the report is asked again later.
	early bool
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
		if err := reportedTooEarly(mails); err != nil {
			return err
		}
		if res.Suppressed, err = s.suppressRecipients(ctx, tx, w, mails); err != nil {
			return err
		}
		fbs, err := webhookFeedback(ctx, tx, w, mails)
		if err != nil {
			return err
		}
		for _, f := range fbs {
			res.Events = append(res.Events, f.Type)
			if f.Type == mailtype.EmailSent {
				res.Reconciled++
			}
		}
		return s.insertFeedbacks(ctx, tx, fbs)
	})
	if err != nil {
		return WebhookResult{}, fmt.Errorf("record %s webhook %s: %w", w.Provider, w.Type, interpretError(err))
	}
	return res, nil
}

// ErrReportTooEarly is a report about a mail whose send is still being
// recorded (status sending): a fast relay can bounce a mail before the
// sender has written its outcome. Nothing is recorded; the caller answers
// so that the provider sends the report again (a 451, a 503).
var ErrReportTooEarly = errors.New("the mail's send is still being recorded: send the report again later")

// reportedTooEarly returns a transient ErrReportTooEarly when one of mails
// is still sending.
func reportedTooEarly(mails []webhookMail) error {
	for _, m := range mails {
		if m.fb.Status == mailtype.StatusSending || m.early {
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, ErrReportTooEarly)
		}
	}
	return nil
}

// mailsOfMessage locks the mails w names: by its VERP mail id, by the
// provider's message id, or, when that names none, by its report tag.
func mailsOfMessage(ctx context.Context, tx pgx.Tx, w Webhook) ([]webhookMail, error) {
	mails, err := mailsOfID(ctx, tx, w)
	if err != nil || len(mails) > 0 || w.MailID != 0 || w.MailTag == "" {
		return mails, err
	}
	return mailsOfTag(ctx, tx, w)
}

func mailsOfID(ctx context.Context, tx pgx.Tx, w Webhook) ([]webhookMail, error) {
	sql, args := mailsOfMessageSQL, []any{w.Provider, w.EmailID}
	if w.MailID != 0 {
		sql, args = mailOfIDSQL, []any{w.MailID, w.Provider}
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookMail, error) {
		var m webhookMail
		err := r.Scan(&m.id, &m.fb.DedupeKey, &m.fb.OrderID, &m.fb.Template, &m.fb.SourceEventID, &m.fb.Attempts,
			&m.fb.Revision, &m.fb.Status, &m.delivered, &m.fb.TraceContext, &m.to, &m.fb.Provider, &m.fb.ProviderMessageID,
			&m.complained)
		return m, err
	})
}

// suppressionTargets are the addresses w suppresses: the stored
// recipient of each mail it names; for a report that names none, the
// addresses it gives, only when the scope is the whole provider account.
func (s *Store) suppressionTargets(w Webhook, mails []webhookMail) []string {
	if _, ok := w.suppresses(); !ok {
		return nil
	}
	if len(mails) == 0 {
		if s.accountSuppression {
			return w.Recipients
		}
		return nil
	}
	out := make([]string, 0, len(mails))
	for _, m := range mails {
		out = append(out, m.to)
	}
	return out
}

// suppressRecipients adds the valid addresses w suppresses, with its
// source and reason, or notes a transient bounce of each mail's
// recipient (TransientRule), and returns how many addresses were new on
// the list.
func (s *Store) suppressRecipients(ctx context.Context, tx pgx.Tx, w Webhook, mails []webhookMail) (int, error) {
	source, ok := w.suppresses()
	transient := w.Effect == EffectBounced && w.BounceType == BounceTransient
	if !ok && !transient {
		return 0, nil
	}
	targets := s.suppressionTargets(w, mails)
	if transient {
		targets = nil
		for _, m := range mails {
			targets = append(targets, m.to)
		}
	}
	// In one order, so that two webhooks naming the same addresses never
	// wait on each other's inserts in opposite orders (a deadlock).
	n := 0
	for _, a := range slices.Sorted(slices.Values(targets)) {
		if checkAddress(a) != nil {
			continue
		}
		var added bool
		var err error
		if transient {
			src := SourceTransient
			if w.MailID != 0 {
				src = SourceDSNTransient
			}
			added, err = s.noteTransient(ctx, tx, a, w.Reason, src)
		} else {
			added, err = suppress(ctx, tx, a, w.Reason, source)
		}
		if err != nil {
			return n, err
		}
		if added {
			n++
		}
	}
	return n, nil
}

// webhookFeedback applies w to each of mails and returns the events it
// writes, in order (see the effects).
func webhookFeedback(ctx context.Context, tx pgx.Tx, w Webhook, mails []webhookMail) ([]Feedback, error) {
	pe := &ProviderEvent{WebhookID: w.ID, Type: w.Type, At: w.At.UTC(), Reason: w.ProviderReason}
	if w.Effect == EffectBounced {
		pe.BounceType, pe.BounceSubtype = w.BounceType, w.BounceSubtype
	}
	var out []Feedback
	for _, m := range mails {
		sent, settled, err := settleUnknown(ctx, tx, w, pe, &m)
		if err != nil {
			return nil, err
		}
		if settled {
			out = append(out, sent)
		}
		f, publish, err := applyWebhook(ctx, tx, w, m)
		if err != nil {
			return nil, err
		}
		if publish {
			if w.MailID == 0 {
				f.Provider, f.ProviderMessageID = w.Provider, w.EmailID
			}
			f.ProviderEvent = pe
			out = append(out, f)
		}
	}
	return out, nil
}

// applyWebhook changes m as w says and returns its event, and whether
// there is one to publish.
func applyWebhook(ctx context.Context, tx pgx.Tx, w Webhook, m webhookMail) (Feedback, bool, error) {
	f := m.fb
	switch w.Effect {
	case EffectDelivered:
		if m.delivered {
			return f, false, nil // a second report of the same delivery
		}
		_, err := tx.Exec(ctx, `UPDATE mail SET delivered_at = $2, updated_at = now() WHERE id = $1`, m.id, w.At)
		f.Type = mailtype.EmailDelivered
		// Reports can come out of order: a delivery reported after the
		// bounce that failed the mail is recorded, not published.
		return f, m.fb.Status == mailtype.StatusSent, err
	case EffectDelayed:
		_, err := tx.Exec(ctx, `UPDATE mail SET delivery_delayed_at = $2 WHERE id = $1`, m.id, w.At)
		return f, false, err
	case EffectComplained:
		if m.complained {
			return f, false, nil // a second report of the same complaint
		}
		_, err := tx.Exec(ctx, `UPDATE mail SET complained_at = $2 WHERE id = $1`, m.id, w.At)
		f.Type = mailtype.EmailComplained
		return f, m.fb.Status == mailtype.StatusSent, err
	case EffectBounced:
		failed, err := failSent(ctx, tx, m, w.Reason)
		if failed {
			f.Status = mailtype.StatusFailed
		}
		f.Type = mailtype.EmailBounced
		// Each bounce of a sent or failed mail publishes; a report that
		// settled nothing about an unknown mail (not evidence) does not.
		return f, f.Status == mailtype.StatusSent || f.Status == mailtype.StatusFailed, err
	case EffectFailed, EffectSuppressed:
		failed, err := failSent(ctx, tx, m, w.Reason)
		f.Type, f.Status, f.ErrorClass = mailtype.EmailFailed, mailtype.StatusFailed, mailtype.Permanent
		f.ErrorReason, f.Error = mailtype.ReasonProviderFailed, mailtype.Sanitize(w.Reason)
		if w.Effect == EffectSuppressed {
			f.ErrorReason = mailtype.ReasonSuppressed
		}
		return f, failed, err // a mail that was not sent has had its final event
	}
	return f, false, nil
}

// failSent makes m failed when it is sent, with reason as its last error,
// and reports whether it did.
func failSent(ctx context.Context, tx pgx.Tx, m webhookMail, reason string) (bool, error) {
	if m.fb.Status != mailtype.StatusSent {
		return false, nil
	}
	tag, err := tx.Exec(ctx, `UPDATE mail SET status = 'failed', last_error = $2, last_error_class = 'permanent', updated_at = now()
WHERE id = $1 AND status = 'sent'`, m.id, mailtype.Sanitize(reason))
	return tag.RowsAffected() == 1, err
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
