package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExpiredSend is a `sending` row whose lease expired and that no claim
// takes again by itself: its send had started (the provider may have the
// mail), or a cancel was requested before it started.
type ExpiredSend struct {
	Fence
	// Started reports whether the expired claim had started its send.
	Started bool
	// Graced reports whether GraceExpired already gave this send its grace
	// (locked_by is GraceHolder) and the grace ran out too.
	Graced bool
	// Sends and Ambiguous are the row's counters (Sends includes the
	// expired send when Started); Sends counts, as Started.Sends, only the
	// sends since the last `mail reconcile --not-delivered`.
	Sends, Ambiguous int
	Template         string
	CancelRequested  bool
	// FirstAttemptAt is when the row's first claim was taken (provider
	// idempotency windows count from here).
	FirstAttemptAt time.Time
}

// expiredSendsSQL reads, oldest lease first, through the partial index
// mail_sending_lease_idx, the expired `sending` rows that need a verdict.
const expiredSendsSQL = `
SELECT id, attempts, send_started_at IS NOT NULL, locked_by IS NOT DISTINCT FROM $2, sends - budget_base, ambiguous,
    template, cancel_requested, COALESCE(first_claimed_at, created_at)
FROM mail
WHERE status = 'sending' AND locked_until < now() AND (send_started_at IS NOT NULL OR cancel_requested)
ORDER BY locked_until, id
LIMIT $1`

// ExpiredSends returns up to limit `sending` rows whose lease expired after
// their send started, or before it started with a cancel requested. The
// caller decides about each and writes its verdict with FinishAttempts and
// Attempt.Settle set, which is fenced by the token and the expired lease,
// so replicas may run this at once and a late owner's own outcome is never
// overwritten.
func (s *Store) ExpiredSends(ctx context.Context, limit int) ([]ExpiredSend, error) {
	rows, err := s.pool.Query(ctx, expiredSendsSQL, limit, GraceHolder)
	if err != nil {
		return nil, fmt.Errorf("read expired sends: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExpiredSend, error) {
		var e ExpiredSend
		err := r.Scan(&e.ID, &e.Token, &e.Started, &e.Graced, &e.Sends, &e.Ambiguous, &e.Template, &e.CancelRequested, &e.FirstAttemptAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read expired sends: %w", interpretError(err))
	}
	return out, nil
}

// GraceHolder is the locked_by of a started send whose lease expired and
// that the janitor gave a grace period: its owner may be alive behind a
// database outage and about to record the provider's answer.
const GraceHolder = "(lease expired: waiting for its owner to record the outcome)"

const graceSQL = `
UPDATE mail m SET locked_until = now() + $3::interval, locked_by = $4, updated_at = now()
FROM unnest($1::bigint[], $2::int[]) AS f(id, token)
WHERE m.id = ANY ($1::bigint[]) AND m.id = f.id AND m.status = 'sending' AND m.attempts = f.token
  AND m.locked_until < now()`

// GraceExpired gives each expired send of fs a grace period: its lease
// becomes now() + grace (database clock) and locked_by GraceHolder, the
// token unchanged, in one statement. A janitor settles a started send only
// after its grace ran out too, so the grace is measured while the database
// answers: after an outage of any length the owner, if alive, has a whole
// grace to record the provider's answer before anyone judges the send. It
// returns how many rows it changed (a fence that no longer holds, or a
// lease renewed meanwhile, is skipped).
func (s *Store) GraceExpired(ctx context.Context, fs []Fence, grace time.Duration) (int, error) {
	ids := make([]int64, len(fs))
	tokens := make([]int32, len(fs))
	for i, f := range fs {
		ids[i], tokens[i] = f.ID, int32(f.Token)
	}
	tag, err := s.pool.Exec(ctx, graceSQL, ids, tokens, grace, GraceHolder)
	if err != nil {
		return 0, fmt.Errorf("grace %d expired sends: %w", len(fs), interpretError(err))
	}
	return int(tag.RowsAffected()), nil
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
