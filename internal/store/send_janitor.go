package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// expireLeasesSQL ends `sending` rows whose lease expired and that no
// claim will take again: attempts exhausted (a lease expiry counts as an
// attempt, so a mail that crashes its worker every time cannot loop
// forever), or cancel_requested (a cancelled mail is not retried). They
// become failed ($3 in last_error), or cancelled when a cancel was
// requested ($4: the outcome of the interrupted send is unknown). The MATERIALIZED
// CTE bounds the batch; SKIP LOCKED lets replicas run it at once; the rows
// are found again by primary key (see claimSQL).
const expireLeasesSQL = `
WITH dead AS MATERIALIZED (
    SELECT id FROM mail
    WHERE status = 'sending' AND locked_until < now()
      AND (attempts >= $1 OR cancel_requested)
    ORDER BY locked_until, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE mail m SET
    status = CASE WHEN m.cancel_requested THEN 'cancelled' ELSE 'failed' END,
    locked_until = NULL,
    locked_by = NULL,
    last_error = CASE WHEN m.cancel_requested THEN $4 ELSE $3 END,
    updated_at = now()
WHERE m.id = ANY (ARRAY(SELECT id FROM dead))
RETURNING m.status, m.attempts, m.dedupe_key, m.order_id, m.template,
    COALESCE(m.event_id::text, ''), COALESCE(m.provider, '')`

// leaseExpiredUnknown is the last_error (and the event's error) of a
// cancelled row whose lease expired mid-send: attempts are not exhausted,
// and whether that send reached the provider is not known.
const leaseExpiredUnknown = "the lease expired during a send whose outcome is unknown; the mail may have been delivered"

// ExpireLeases ends up to limit rows whose lease expired with attempts >=
// maxAttempts (failed, EmailFailed with reason attempts_exhausted) or with
// cancel_requested set (cancelled, EmailCancelled with class ambiguous and
// reason lease_expired: the last send may have been delivered), each with
// its feedback event in the same transaction. It returns how many rows it
// ended. Safe to run on every replica at once.
func (s *Store) ExpireLeases(ctx context.Context, maxAttempts, limit int) (int, error) {
	msg := string(mailtype.ReasonAttemptsExceeded) + ": " + string(mailtype.ReasonLeaseExpired)
	cancelledMsg := string(mailtype.ReasonLeaseExpired) + ": " + leaseExpiredUnknown
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, expireLeasesSQL, maxAttempts, limit, msg, cancelledMsg)
		if err != nil {
			return err
		}
		fbs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Feedback, error) {
			var f Feedback
			err := r.Scan(&f.Status, &f.Attempts, &f.DedupeKey, &f.OrderID, &f.Template, &f.SourceEventID, &f.Provider)
			return f, err
		})
		if err != nil {
			return err
		}
		for _, f := range fbs {
			f.Type = feedbackType(f.Status)
			f.ErrorClass, f.ErrorReason = mailtype.Ambiguous, mailtype.ReasonLeaseExpired
			f.Error = leaseExpiredUnknown
			if f.Status == mailtype.StatusFailed {
				f.ErrorClass, f.ErrorReason = mailtype.Permanent, mailtype.ReasonAttemptsExceeded
				f.Error = "lease expired on the last attempt"
			}
			if err := s.insertFeedback(ctx, tx, f); err != nil {
				return err
			}
		}
		n = len(fbs)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire leases: %w", interpretError(err))
	}
	return n, nil
}

// deleteFinishedSQL deletes one batch of finished rows (tombstones
// included) last changed before the window, oldest first, through the
// partial index mail_finished_idx. `unknown` rows are never deleted: they
// wait for an operator.
const deleteFinishedSQL = `
WITH old AS MATERIALIZED (
    SELECT id FROM mail
    WHERE status IN ('sent', 'failed', 'cancelled') AND updated_at < now() - $1::interval
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM mail WHERE id = ANY (ARRAY(SELECT id FROM old))`

// DeleteFinished deletes up to limit sent, failed and cancelled rows whose
// updated_at is older than window (database clock) and returns how many it
// deleted. Callers loop in small batches so that no statement holds many
// locks or runs long.
func (s *Store) DeleteFinished(ctx context.Context, window time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteFinishedSQL, window, limit)
	if err != nil {
		return 0, fmt.Errorf("delete finished mails: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}

// CountUnknown returns how many mails are `unknown` (waiting for an
// operator to reconcile them).
func (s *Store) CountUnknown(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM mail WHERE status = 'unknown'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unknown mails: %w", interpretError(err))
	}
	return n, nil
}
