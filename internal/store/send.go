package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Outcome is what one send attempt of a claimed row ended in, to be
// recorded by FinishAttempt.
type Outcome struct {
	// Status is the row's next status: sent, pending (retry), failed or
	// unknown.
	Status mailtype.Status
	// IfCancelRequested is the status used instead when the row's
	// cancel_requested is set at the time of the write (the consumer may set
	// it at any moment during the send); "" means Status. A sender passes
	// cancelled for a retry or a failure, so that a cancelled mail is never
	// retried (DESIGN.md section 5).
	IfCancelRequested mailtype.Status
	// RetryAfter is the delay before the next attempt when the row goes back
	// to pending (send_after = now() + RetryAfter, database clock).
	RetryAfter time.Duration
	// Provider names the provider of the attempt ("smtp", "resend").
	Provider string
	// ProviderMessageID is the provider's id of an accepted mail, if any.
	ProviderMessageID string
	// ErrorClass, ErrorReason and Error describe a failed attempt; Error
	// must be sanitized already (mailtype.Sanitize). They go to last_error
	// and to the feedback event.
	ErrorClass  mailtype.Class
	ErrorReason mailtype.Reason
	Error       string
}

// Finished is what FinishAttempt wrote.
type Finished struct {
	// Status is the status the row has now.
	Status mailtype.Status
	// Event is the feedback event written with it, "" for a retry.
	Event mailtype.EventType
}

// finishSQL is the fenced write of an attempt's outcome. $3 is the status
// when cancel_requested is set, $4 otherwise; the CASE is evaluated on the
// row version the UPDATE locks, so a cancel committed during the send is
// seen.
const finishSQL = `
UPDATE mail SET
    status = CASE WHEN cancel_requested THEN $3 ELSE $4 END,
    send_after = CASE WHEN (CASE WHEN cancel_requested THEN $3 ELSE $4 END) = 'pending'
        THEN now() + $5::interval ELSE send_after END,
    sent_at = CASE WHEN (CASE WHEN cancel_requested THEN $3 ELSE $4 END) = 'sent'
        THEN now() ELSE sent_at END,
    locked_until = NULL,
    locked_by = NULL,
    provider = NULLIF($6, ''),
    provider_message_id = COALESCE(NULLIF($7, ''), provider_message_id),
    last_error = NULLIF($8, ''),
    updated_at = now()
WHERE id = $1 AND status = 'sending' AND attempts = $2
RETURNING status, dedupe_key, order_id, template, COALESCE(event_id::text, '')`

// FinishAttempt records the outcome of the attempt fenced by f, in one short
// transaction: the row's new status and, for a terminal status, its
// feedback event (EmailSent, EmailFailed, EmailCancelled or EmailUnknown)
// in the outbox. It returns ErrLeaseLost, writing nothing, when the row is
// no longer `sending` with f's token. Database errors are classified
// (transient, ReasonDatabase); nothing is committed then.
func (s *Store) FinishAttempt(ctx context.Context, f Fence, o Outcome) (Finished, error) {
	ifCancel := o.IfCancelRequested
	if ifCancel == "" {
		ifCancel = o.Status
	}
	var fin Finished
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var fb Feedback
		err := tx.QueryRow(ctx, finishSQL, f.ID, f.Token, string(ifCancel), string(o.Status), o.RetryAfter,
			o.Provider, o.ProviderMessageID, o.lastError()).
			Scan(&fin.Status, &fb.DedupeKey, &fb.OrderID, &fb.Template, &fb.SourceEventID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrLeaseLost
		}
		if err != nil {
			return err
		}
		fin.Event = feedbackType(fin.Status)
		if fin.Event == "" {
			return nil
		}
		fb.Type, fb.Status, fb.Attempts = fin.Event, fin.Status, f.Token
		fb.Provider, fb.ProviderMessageID = o.Provider, o.ProviderMessageID
		if fin.Status != mailtype.StatusSent {
			fb.ErrorClass, fb.ErrorReason, fb.Error = o.ErrorClass, o.ErrorReason, o.Error
		}
		return s.insertFeedback(ctx, tx, fb)
	})
	if errors.Is(err, ErrLeaseLost) {
		return Finished{}, ErrLeaseLost
	}
	if err != nil {
		return Finished{}, fmt.Errorf("finish attempt %d of mail %d: %w", f.Token, f.ID, interpretError(err))
	}
	return fin, nil
}

// lastError is the last_error text: "reason: message", or "" for success.
func (o Outcome) lastError() string {
	if o.ErrorReason == "" && o.Error == "" {
		return ""
	}
	if o.Error == "" {
		return string(o.ErrorReason)
	}
	return string(o.ErrorReason) + ": " + o.Error
}

// feedbackType is the event a transition into status emits, "" for a
// non-terminal status.
func feedbackType(status mailtype.Status) mailtype.EventType {
	switch status {
	case mailtype.StatusSent:
		return mailtype.EmailSent
	case mailtype.StatusFailed:
		return mailtype.EmailFailed
	case mailtype.StatusCancelled:
		return mailtype.EmailCancelled
	case mailtype.StatusUnknown:
		return mailtype.EmailUnknown
	}
	return ""
}
