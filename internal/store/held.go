package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// HeldFilter selects held mails for ReleaseHeld and CancelHeld.
type HeldFilter struct {
	// To keeps the mails to this address (compared lower-cased); "" keeps
	// every held mail.
	To string
	// Limit is the most mails acted on; it must be positive.
	Limit int
}

// releaseHeldSQL makes held mails pending and due now. $1 the address or
// "", $2 the limit. The per-recipient limit is not counted again: the
// operator's word overrides it.
const releaseHeldSQL = `
WITH picked AS MATERIALIZED (` + pickHeldSQL + `)
UPDATE mail m SET status = 'pending', send_after = now(), updated_at = now()
FROM picked WHERE m.id = picked.id AND m.status = 'held'`

// pickHeldSQL locks up to $2 held mails to $1 (or all for ""), oldest
// first. It is materialized: as a plain IN (subquery) the planner may run
// the LIMIT more than once and pick more rows.
const pickHeldSQL = `SELECT id FROM mail WHERE status = 'held' AND ($1 = '' OR lower(to_email) = lower($1))
ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`

// ReleaseHeld makes up to f.Limit held mails pending, oldest first, and
// returns how many; the sender claims them as any other. Errors are
// transient *mailtype.Error (ReasonDatabase).
func (s *Store) ReleaseHeld(ctx context.Context, f HeldFilter) (int64, error) {
	if f.Limit <= 0 {
		return 0, fmt.Errorf("limit: must be positive, not %d", f.Limit)
	}
	tag, err := s.pool.Exec(ctx, releaseHeldSQL, f.To, f.Limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return tag.RowsAffected(), nil
}

// cancelHeldSQL cancels held mails; $1 the address or "", $2 the limit.
const cancelHeldSQL = `
WITH picked AS MATERIALIZED (` + pickHeldSQL + `)
UPDATE mail m SET status = 'cancelled', updated_at = now(),
    last_error = 'cancelled by an operator: held over the per-recipient limit'
FROM picked WHERE m.id = picked.id AND m.status = 'held'
RETURNING m.dedupe_key, m.order_id, m.revision, m.template, COALESCE(m.event_id::text, ''), COALESCE(m.trace_context, '')`

// CancelHeld cancels up to f.Limit held mails, oldest first, each with its
// EmailCancelled in the same transaction (invariant 3), and returns how
// many. A held mail was never handed to a provider, so cancelled is true
// of it. Errors are transient *mailtype.Error (ReasonDatabase).
func (s *Store) CancelHeld(ctx context.Context, f HeldFilter) (int64, error) {
	if f.Limit <= 0 {
		return 0, fmt.Errorf("limit: must be positive, not %d", f.Limit)
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, cancelHeldSQL, f.To, f.Limit)
		if err != nil {
			return err
		}
		var fbs []Feedback
		for rows.Next() {
			fb := Feedback{Type: mailtype.EmailCancelled, Status: mailtype.StatusCancelled}
			if err := rows.Scan(&fb.DedupeKey, &fb.OrderID, &fb.Revision, &fb.Template, &fb.SourceEventID, &fb.TraceContext); err != nil {
				rows.Close()
				return err
			}
			fbs = append(fbs, fb)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, fb := range fbs {
			if err := s.insertFeedback(ctx, tx, fb); err != nil {
				return err
			}
		}
		n = int64(len(fbs))
		return nil
	})
	if err != nil {
		return 0, interpretError(err)
	}
	return n, nil
}

// deleteOldWindowsSQL forgets the per-recipient counts of windows that
// ended before $1 seconds ago; $2 bounds one delete.
const deleteOldWindowsSQL = `
DELETE FROM recipient_window WHERE ctid IN (
    SELECT ctid FROM recipient_window WHERE window_start < now() - $1::int * interval '1 second' LIMIT $2)`

// DeleteOldRecipientWindows deletes up to limit per-recipient counts
// older than two windows of w and returns how many.
func (s *Store) DeleteOldRecipientWindows(ctx context.Context, w RecipientLimit, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteOldWindowsSQL, int32(2*w.Window.Seconds()), limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return tag.RowsAffected(), nil
}
