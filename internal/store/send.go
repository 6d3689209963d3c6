package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Outcome is what one send attempt of a claimed row ended in, to be
// recorded by FinishAttempts.
type Outcome struct {
	// Status is the row's next status: sent, pending (retry), failed or
	// unknown.
	Status mailtype.Status
	// IfCancelRequested is the status used instead when the row's
	// cancel_requested is set at the time of the write (the consumer may set
	// it at any moment during the send); "" means Status. A sender passes
	// cancelled for a retry or a failure, so that a cancelled mail is never
	// retried (docs/design.md, "State machine").
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
	// ("reason: error"), last_error_class and the feedback event.
	ErrorClass  mailtype.Class
	ErrorReason mailtype.Reason
	Error       string
	// Detail is what the provider said about a failed attempt (reply code,
	// enhanced status code, HTTP status, error name); it goes to the
	// feedback event with the error fields (data.provider_detail), never to
	// last_error.
	Detail mailtype.ProviderDetail
	// FailoverFrom names the primary provider when Provider is the fallback
	// that made this attempt (sender.fallback_provider); it goes to the
	// feedback event (data.failover_from).
	FailoverFrom string
	// Release ends a claim whose send is not counted in the row's sends:
	// one that never handed the mail to the provider, or whose provider
	// failed on its own account (an outage, an unanswered request under a
	// live idempotency key). The row goes back to Status (pending, due
	// after RetryAfter; failed for a mail found stale before its send) or,
	// with a cancel requested, to IfCancelRequested (cancelled), and keeps
	// the provider of its earlier sends unless Provider is set (a release
	// that counts an ambiguous outcome names the provider that may have
	// the mail), and their last error unless this outcome has one.
	Release bool
	// Ambiguous counts this attempt as an ambiguous outcome (the row's
	// ambiguous column grows by one; sender.ambiguous_retries reads it).
	Ambiguous bool
	// Suppress puts the mail's recipient on the suppression list (source
	// smtp/reject, reason Error) in the outcome's transaction: the
	// provider refused the recipient for good (suppression.smtp_codes).
	Suppress bool
	// TraceContext is the stored trace context (tracing.Encode) of the
	// send's span, carried by the feedback events the outcome writes; ""
	// means the row's own trace_context (a release, the janitor's verdict,
	// or tracing off).
	TraceContext string
}

// Finished is what FinishAttempts wrote for one attempt.
type Finished struct {
	// Status is the status the row has now.
	Status mailtype.Status
	// Event is the feedback event written with it, "" for a retry.
	Event mailtype.EventType
	// DedupeKey and EventID identify the mail (EventID is "" for a
	// tombstone); Sends is how many of its sends started, as its feedback
	// events count attempts; CreatedAt is when its row was written.
	DedupeKey string
	EventID   string
	Sends     int
	CreatedAt time.Time
}

// finishManySQL is the fenced write of many outcomes in one statement: row
// i of the arrays is the outcome of the attempt fenced by ($1[i], $2[i]); $3 is the
// status when cancel_requested is set, $4 otherwise, $5 the retry delay in
// milliseconds, $8 and $13 last_error and its class (a release without an
// error keeps both). The next status (x.next) is computed from prior, the
// row version locked before the write, so a cancel committed during the
// send is seen; nobody can change the row between that lock and the
// write. A release (a claim that never handed the mail over) of a mail
// whose earlier send was ambiguous never ends cancelled or failed: that
// send may have delivered it, so it ends unknown (docs/contract.md, the
// outcome table), and the last column reports it. `m.id = ANY($1)` keeps
// it an index scan of the primary key.
//
// The fence is the token: status 'sending' with the same attempts, or, for
// a late write (the provider's own answer, sent or failed, recorded after
// the janitor settled the expired lease), 'pending' or 'unknown' with the
// same attempts: no claim took the row since, so no other send started and
// the provider's answer is still the truth about it. A settle write (the
// janitor's) also demands that the lease expired.
//
// prior locks the rows first and keeps what they were before the write
// (status, cancel_requested), which RETURNING cannot see: a send whose
// cancel was requested while it ran reports EmailCancelTooLate after its
// outcome when it ended sent or unknown, and only on that write, not on a
// late write onto a row the janitor settled already. The lock is taken in
// primary-key order, so two concurrent writes cannot deadlock.
const finishManySQL = `
WITH ` + finishPriorCTE + finishUpdateSQL

// finishPriorCTE is finishManySQL's prior: the rows locked, in primary-key
// order, as they were before the write.
const finishPriorCTE = `prior AS (
    SELECT id, status, cancel_requested, ambiguous FROM mail WHERE id = ANY ($1::bigint[]) ORDER BY id FOR UPDATE
)
`

// finishUpdateSQL is finishManySQL's fenced write, which finishSQL (the
// write and its feedback in one statement) runs as a CTE too.
const finishUpdateSQL = `
UPDATE mail m SET
    status = x.next,
    send_after = CASE WHEN x.next = 'pending' THEN now() + o.retry_ms * interval '1 millisecond' ELSE m.send_after END,
    sent_at = CASE WHEN x.next = 'sent' THEN now() ELSE m.sent_at END,
    locked_until = NULL,
    locked_by = NULL,
    provider = CASE WHEN o.release AND o.provider = '' THEN m.provider ELSE NULLIF(o.provider, '') END,
    provider_message_id = COALESCE(NULLIF(o.pmid, ''), m.provider_message_id),
    last_error = CASE WHEN o.release AND o.last_error = '' THEN m.last_error ELSE NULLIF(o.last_error, '') END,
    last_error_class = CASE WHEN o.release AND o.last_error = '' THEN m.last_error_class ELSE NULLIF(o.class, '') END,
    ambiguous = m.ambiguous + o.amb,
    sends = CASE WHEN o.release AND m.send_started_at IS NOT NULL THEN m.sends - 1 ELSE m.sends END,
    send_started_at = CASE WHEN o.release THEN NULL ELSE m.send_started_at END,
    updated_at = now()
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[],
            $9::bool[], $10::int[], $11::bool[], $12::bool[], $13::text[])
    AS o(id, token, if_cancel, status, retry_ms, provider, pmid, last_error, release, amb, late, settle, class)
    JOIN prior ON prior.id = o.id
    CROSS JOIN LATERAL (SELECT CASE WHEN prior.cancel_requested THEN o.if_cancel ELSE o.status END AS asked) AS a
    CROSS JOIN LATERAL (SELECT CASE WHEN o.release AND prior.ambiguous > 0 AND a.asked IN ('cancelled', 'failed')
        THEN 'unknown' ELSE a.asked END AS next) AS x
WHERE m.id = ANY ($1::bigint[]) AND m.id = o.id AND m.attempts = o.token
  AND (m.status = 'sending' OR (o.late AND m.status IN ('pending', 'unknown')))
  AND (NOT o.settle OR (m.status = 'sending' AND m.locked_until < now()))
RETURNING m.id, m.attempts, m.status, m.dedupe_key, m.order_id, m.template, COALESCE(m.event_id::text, ''), m.sends,
    m.revision, prior.status = 'sending' AND prior.cancel_requested, COALESCE(m.cancel_event_id::text, ''),
    o.release AND x.next = 'unknown', m.created_at, COALESCE(m.trace_context, '')`

// Attempt is one attempt's outcome to record with FinishAttempts.
type Attempt struct {
	Fence
	Outcome Outcome
	// Settle marks the janitor's verdict on a send whose lease expired: it
	// is written only while the row is still `sending` with an expired
	// lease. Without it, a sent or failed outcome (the provider's own
	// answer) is also written when the janitor settled the row meanwhile
	// (pending or unknown, same token): see finishManySQL.
	Settle bool
	// Known, when set, is what the writer knows of the row: its outcome
	// event is then encoded before the write and written by the same
	// statement (finishSQL). Nil: the event is built from the row the
	// write returns, in a second statement.
	Known *Known
}

// Known is what the writer of an outcome knows of its row from the claim
// (ClaimedMail) and the send's started mark (Started.TotalSends): what the
// outcome event says of the mail besides the outcome. A Known that does
// not match the row costs one more round trip, never a wrong event: the
// write checks the status and sends it predicts, and the rest is checked
// before the commit.
type Known struct {
	DedupeKey, OrderID, Template string
	// EventID is the input event's id ("" for none); TraceContext the
	// row's stored trace context ("" for none).
	EventID, TraceContext string
	// Revision is the order revision of the mail (>= 1).
	Revision int
	// Sends is the row's sends after the mark (Started.TotalSends): an
	// outcome that is not a release leaves it as it is.
	Sends     int
	CreatedAt time.Time
}

// AttemptResult is what FinishAttempts did with one Attempt: Err is nil or
// ErrLeaseLost (nothing written for that row).
type AttemptResult struct {
	Finished
	Err error
}

// FinishAttempts records many outcomes in one transaction (one commit, one
// WAL flush), each row's write fenced by its own token: a row that is no
// longer `sending` with its token (see finishManySQL for the late and
// settle writes) gets ErrLeaseLost in its result and is left untouched; the
// others get their new status and, for a terminal status, their feedback
// event (EmailSent, EmailFailed, EmailCancelled or EmailUnknown) in the
// outbox. One statement does it whatever the batch size when every
// attempt with an event carries its Known (finishSQL), two otherwise (the
// events built from the returned rows are inserted by a second), plus one
// per cancellation notice. Database errors are classified (transient,
// ReasonDatabase); an error return means nothing was committed, and the
// caller may retry the whole call.
func (s *Store) FinishAttempts(ctx context.Context, as []Attempt) ([]AttemptResult, error) {
	res, _, err := s.FinishAndStart(ctx, as, nil, StartLease{})
	return res, err
}

// FinishAndStart records the outcomes as (exactly as FinishAttempts) and
// marks the sends of the claims starts as started (exactly as
// MarkStarted, the lease renewed as lease says) in one transaction: one
// commit for a worker's previous outcome and its next send's mark, shared
// by every worker that writes at the same moment. The caller may retry
// the whole call after an error: a statement error committed nothing, and
// after a broken connection the transaction may have committed, which the
// fenced retry then finds (ErrLeaseLost, nothing changed; see
// finishPipelined).
func (s *Store) FinishAndStart(ctx context.Context, as []Attempt, starts []Fence, lease StartLease) ([]AttemptResult, []Started, error) {
	if len(as) == 0 {
		if len(starts) == 0 {
			return nil, nil, nil
		}
		st, err := s.MarkStarted(ctx, starts, lease)
		return nil, st, err
	}
	res := make([]AttemptResult, len(as))
	var started []Started
	err := s.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		var err error
		started, err = s.finishPipelined(ctx, c.Conn(), as, res, starts, lease)
		if errors.Is(err, errKnownMissed) {
			started, err = s.finishPipelined(ctx, c.Conn(), unknown(as), res, starts, lease)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("finish %d attempts, start %d: %w", len(as), len(starts), interpretError(err))
	}
	return res, started, nil
}

// unknown is as without what the writer knew of the rows (Known).
func unknown(as []Attempt) []Attempt {
	out := make([]Attempt, len(as))
	for i, a := range as {
		a.Known = nil
		out[i] = a
	}
	return out
}

// notice is a cancellation notice to write: the key of the confirmation
// that was too late, and the trace context the notice carries.
type notice struct{ key, traceContext string }

// outcomeArgs are finishManySQL's arguments for as.
func outcomeArgs(as []Attempt) []any {
	n := len(as)
	ids, tokens := make([]int64, n), make([]int32, n)
	ifCancel, status, provider, pmid, lastErr := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	class := make([]string, n)
	retryMS := make([]int64, n)
	release, late, settle, amb := make([]bool, n), make([]bool, n), make([]bool, n), make([]int32, n)
	for i, a := range as {
		o := a.Outcome
		ids[i], tokens[i] = a.ID, int32(a.Token)
		status[i], ifCancel[i] = string(o.Status), string(o.IfCancelRequested)
		if ifCancel[i] == "" {
			ifCancel[i] = status[i]
		}
		retryMS[i] = o.RetryAfter.Milliseconds()
		provider[i], pmid[i], lastErr[i] = o.Provider, o.ProviderMessageID, o.lastError()
		if lastErr[i] != "" {
			class[i] = string(o.ErrorClass) // last_error_class: the class of last_error
		}
		release[i], settle[i] = o.Release, a.Settle
		late[i] = !a.Settle && !o.Release && (o.Status == mailtype.StatusSent || o.Status == mailtype.StatusFailed)
		if o.Ambiguous {
			amb[i] = 1
		}
	}
	return []any{ids, tokens, ifCancel, status, retryMS, provider, pmid, lastErr, release, amb, late, settle, class}
}

// applyFinished fills res from the rows finishManySQL returned (an attempt
// without its row lost its lease) and returns the feedback events and
// notices still to write: written[i] says that the outcome event of as[i]
// was written with the outcome already (finishSQL).
func applyFinished(as []Attempt, got map[Fence]finishedRow, res []AttemptResult, written []bool) ([]Feedback, []notice) {
	var fbs []Feedback
	var notices []notice
	for i, a := range as {
		r, ok := got[a.Fence]
		if !ok {
			res[i].Err = ErrLeaseLost
			continue
		}
		res[i].Status, res[i].Event = r.status, feedbackType(r.status)
		res[i].DedupeKey, res[i].EventID, res[i].Sends, res[i].CreatedAt = r.fb.DedupeKey, r.fb.SourceEventID, r.sends, r.createdAt
		if res[i].Event == "" {
			continue
		}
		fb := eventOf(a.Outcome, r)
		if !written[i] {
			fbs = append(fbs, fb)
		}
		if r.cancelRequested && (r.status == mailtype.StatusSent || r.status == mailtype.StatusUnknown) {
			fbs = append(fbs, tooLate(fb, r.cancelEventID))
			notices = append(notices, notice{key: fb.DedupeKey, traceContext: fb.TraceContext})
		}
	}
	return fbs, notices
}

// eventOf is the outcome event of o written onto the row r (r.status has
// an event).
func eventOf(o Outcome, r finishedRow) Feedback {
	fb := r.fb
	fb.Type, fb.Status, fb.Attempts = feedbackType(r.status), r.status, r.sends
	fb.Provider, fb.ProviderMessageID, fb.FailoverFrom = o.Provider, o.ProviderMessageID, o.FailoverFrom
	if o.TraceContext != "" {
		fb.TraceContext = o.TraceContext
	}
	if o.Release && !o.Ambiguous {
		fb.Provider, fb.FailoverFrom = "", ""
	}
	if r.status != mailtype.StatusSent {
		fb.ErrorClass, fb.ErrorReason, fb.Error = o.ErrorClass, o.ErrorReason, o.Error
		fb.Detail = o.Detail
	}
	if r.releasedUnknown {
		fb.ErrorClass, fb.ErrorReason, fb.Error = releasedUnknown(o, r.cancelRequested)
	}
	return fb
}

// finishedRow is one row finishManySQL wrote.
type finishedRow struct {
	status mailtype.Status
	sends  int
	fb     Feedback
	// cancelRequested: the row was sending with a cancel requested.
	cancelRequested bool
	cancelEventID   string
	// releasedUnknown: a release ended unknown because an earlier send of
	// the mail was ambiguous (see finishManySQL).
	releasedUnknown bool
	createdAt       time.Time
}

func scanFinished(rows pgx.Rows) (map[Fence]finishedRow, error) {
	defer rows.Close()
	got := make(map[Fence]finishedRow)
	for rows.Next() {
		var f Fence
		var r finishedRow
		if err := rows.Scan(&f.ID, &f.Token, &r.status, &r.fb.DedupeKey, &r.fb.OrderID, &r.fb.Template,
			&r.fb.SourceEventID, &r.sends, &r.fb.Revision, &r.cancelRequested, &r.cancelEventID, &r.releasedUnknown,
			&r.createdAt, &r.fb.TraceContext); err != nil {
			return nil, err
		}
		got[f] = r
	}
	return got, rows.Err()
}

// releasedUnknown is the error of the EmailUnknown of a release that
// ended unknown (an earlier send was ambiguous): the release's own reason
// when it has one (stale), else the cancel that stopped the retry.
func releasedUnknown(o Outcome, cancelled bool) (mailtype.Class, mailtype.Reason, string) {
	switch {
	case o.ErrorReason != "":
		return mailtype.Ambiguous, o.ErrorReason, o.Error + "; an earlier send may have delivered the mail"
	case cancelled:
		return mailtype.Ambiguous, mailtype.ReasonCancelledAmbiguous, cancelledAmbiguousError
	}
	return mailtype.Ambiguous, mailtype.ReasonOther, "an earlier send may have delivered the mail"
}

// tooLate is the EmailCancelTooLate that follows the outcome event of a
// send whose cancel came while it ran and that was, or may have been,
// delivered; its source is the cancel event.
func tooLate(outcome Feedback, cancelEventID string) Feedback {
	f := outcome
	f.Type, f.SourceEventID = mailtype.EmailCancelTooLate, cancelEventID
	f.ErrorClass, f.ErrorReason, f.Error = "", "", ""
	return f
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
