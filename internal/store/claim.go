package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrLeaseLost is returned by every write to a claimed row when the row is
// no longer `sending` with the caller's fencing token: its lease expired and
// another worker reclaimed it, or it was finished already. The caller must
// record nothing else about the row (docs/design.md, "Invariants": fenced writes).
var ErrLeaseLost = errors.New("lease lost: the row has another owner or is finished")

// Fence identifies one claim of a row: the row id and the attempts value
// the claim set, which is the fencing token every later write is
// conditioned on.
type Fence struct {
	ID    int64
	Token int
}

// ClaimParams configures ClaimMails.
type ClaimParams struct {
	// Limit is the most rows one claim takes; it must be positive.
	Limit int
	// Lease is how long the claim owns each row (locked_until = now() +
	// Lease, on the database clock).
	Lease time.Duration
	// Worker is written to locked_by, for operators.
	Worker string
	// Weighted, when set, bounds the priority lane's rows to PriorityShare
	// while bulk rows are due too (the dispatcher's weighted sharing,
	// sender.priority_weight); the lane that has fewer due rows than its
	// share leaves the rest to the other. Unset, the priority lane goes
	// first (strict priority).
	Weighted bool
	// PriorityShare is the most priority rows the claim takes while bulk
	// rows are due (0..Limit); read only when Weighted.
	PriorityShare int
}

// PriorityRows is the most priority-lane rows the claim takes while bulk
// rows are due (the claim statement's $4): PriorityShare within 0..Limit
// when Weighted, else Limit (strict priority).
func (p ClaimParams) PriorityRows() int {
	if !p.Weighted {
		return p.Limit
	}
	return min(max(p.PriorityShare, 0), p.Limit)
}

// ClaimedMail is one row a claim took, with everything a provider needs to
// send it. Content (subject, bodies, Message-ID) was rendered once by the
// consumer; every attempt sends exactly these bytes.
type ClaimedMail struct {
	Fence
	// Reclaimed is true when the row was `sending` with an expired lease
	// and its previous claim never started a send (a crash or a stop before
	// the send-started mark): nothing reached the provider, no attempt was
	// spent. Rows whose send had started are never reclaimed by a claim;
	// SettleExpired decides about them.
	Reclaimed bool
	// EventID is the input event that created the row ("" never happens for
	// a claimable row, tombstones are never pending).
	EventID   string
	DedupeKey string
	OrderID   string
	Template  string
	Locale    string
	ToEmail   string
	// ToName is the recipient's display name, cleaned when the row was
	// written. For a Legacy row it is the raw payload value (customer_name,
	// not cleaned, of any length) and must go through
	// templates.DisplayName before it is put in a header.
	ToName string
	// From, ReplyTo and IdempotencyKey were fixed when the row was written;
	// every attempt sends them as they are.
	From           string
	ReplyTo        string
	IdempotencyKey string
	// Legacy is true for a row written before the envelope columns existed
	// (From is ""): its sender fills From, ToName and IdempotencyKey from
	// its config.
	Legacy bool
	// Sends is how many sends of the row started before this claim;
	// Ambiguous how many of them ended ambiguous.
	Sends     int
	Ambiguous int
	Subject   string
	BodyText  string
	BodyHTML  string
	MessageID string
	CreatedAt time.Time
	// FirstAttemptAt is when the first attempt of the row was claimed
	// (provider idempotency windows count from here).
	FirstAttemptAt time.Time
	// LockedUntil is the lease end on the database clock.
	LockedUntil time.Time
	// OccurredAt is when the event that asked for the mail occurred (the
	// producer's clock; for a resend or a cancellation notice, when it was
	// written): the max event age counts from here, at send time too.
	OccurredAt time.Time
	// Suppressed is true when ToEmail is on the suppression list at the
	// claim (compared as mailsvc_address_key normalises them, migration
	// 00090): the mail must not be handed to the provider.
	Suppressed bool
	// Provider is the provider of the row's last recorded send ("" when
	// none): after an ambiguous outcome the mail is only sent again through
	// the same one (sender.fallback_provider never takes it).
	Provider string
	// HasAttachments is true for a mail whose event named attachments;
	// Attachments are its stored files (an omitted optional one left out),
	// loaded with the claim (attach.go).
	HasAttachments bool
	Attachments    []AttachmentFile
	// TraceContext is the row's stored trace context (the consumer's span
	// of the event that asked for the mail), "" when it has none; the send
	// span is its child.
	TraceContext string
	// Lane is the row's priority lane.
	Lane mailtype.Lane
	// Revision is the order revision of the mail (>= 1).
	Revision int
}

// Known is what the claim and the send's started mark st tell of the row,
// for the outcome's write (Attempt.Known).
func (m *ClaimedMail) Known(st Started) *Known {
	return &Known{DedupeKey: m.DedupeKey, OrderID: m.OrderID, Template: m.Template, EventID: m.EventID,
		TraceContext: m.TraceContext, Revision: m.Revision, Sends: st.TotalSends, CreatedAt: m.CreatedAt}
}

// claimSQL takes at most $1 rows in one statement (docs/design.md, "Claim").
// Both CTEs are MATERIALIZED and carry their own LIMIT, so the rows they
// lock are computed once and can never exceed the bound, whatever the plan
// (an `id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)` may be re-run per
// outer row and take more). Expired leases go first and the due rows fill
// the rest of the batch. Each CTE is an ordered scan of its own partial
// index (mail_sending_lease_idx, mail_pending_lane_due_idx, one scan per lane), which holds only
// rows with work left, so the cost does not grow with finished rows. The
// UPDATE finds the taken rows with `id = ANY(ARRAY(...))`, an index
// condition on the primary key: a join with the CTEs was planned as a hash
// join over a sequential scan of the whole table (the LIMIT expression
// defeats the row estimate), which is the cost this design must not pay.
// A mail whose attachments are not all fetched and verified
// (attach_state 'pending', attach.go) is never taken: it is not due yet.
// Rows with cancel_requested are never taken: a cancelled mail is not
// retried. An expired lease is taken only when its claim never started a
// send (send_started_at NULL): that reclaim is silent and spends nothing.
// Each taken row also says whether its recipient is suppressed: a scalar
// subquery, so one probe of the suppression table's primary key per taken
// row whatever the statistics say (an EXISTS may be planned as a hash of
// the whole list), in the same statement, so the check costs no round
// trip.
const claimSQL = `
WITH expired AS MATERIALIZED (
    SELECT id FROM mail
    WHERE status = 'sending' AND locked_until < now()
      AND send_started_at IS NULL AND NOT cancel_requested
    ORDER BY locked_until, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), priority AS MATERIALIZED (
    SELECT id FROM mail
    WHERE status = 'pending' AND NOT cancel_requested AND send_after <= now() AND lane = 1
      AND attach_state IS DISTINCT FROM 'pending'
    ORDER BY send_after, id
    LIMIT $1 - (SELECT count(*) FROM expired)
    FOR UPDATE SKIP LOCKED
), bulk AS MATERIALIZED (
    SELECT id FROM mail
    WHERE status = 'pending' AND NOT cancel_requested AND send_after <= now() AND lane = 0
      AND attach_state IS DISTINCT FROM 'pending'
    ORDER BY send_after, id
    LIMIT $1 - (SELECT count(*) FROM expired) - LEAST((SELECT count(*) FROM priority), $4)
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    (SELECT id FROM priority LIMIT $1 - (SELECT count(*) FROM expired) - (SELECT count(*) FROM bulk))
    UNION ALL SELECT id FROM bulk
)
UPDATE mail m SET
    status = 'sending',
    attempts = m.attempts + 1,
    locked_until = now() + $2::interval,
    locked_by = $3,
    send_started_at = NULL,
    first_claimed_at = COALESCE(m.first_claimed_at, now()),
    updated_at = now()
WHERE m.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM due))
RETURNING m.id, m.attempts, m.id = ANY (ARRAY(SELECT id FROM expired)), COALESCE(m.event_id::text, ''),
    m.dedupe_key, m.order_id, m.template, m.locale, m.to_email,
    CASE WHEN m.from_addr = '' THEN COALESCE(m.payload->>'customer_name', m.payload#>>'{data,customer_name}', '')
         ELSE m.to_name END,
    m.from_addr, m.reply_to, m.idempotency_key, m.sends, m.ambiguous,
    m.subject, m.body_text, m.body_html, m.message_id, m.created_at, m.first_claimed_at,
    m.locked_until, COALESCE(m.occurred_at, m.created_at),
    ` + suppressedExpr + `, COALESCE(m.provider, ''),
    COALESCE(m.trace_context, ''), m.lane, m.attach_state IS NOT NULL, m.revision`

// claimableSQL says whether a claim would take a row now (claimSQL's
// three parts: an expired lease whose send never started, a due pending
// row of either lane), each an index probe that stops at the first row.
// An insert leases its mails only while it is false (insertMailsSQL), so
// that a row handed over in memory never passes an older due one: a row
// another process released, a retry whose time came, another replica's
// expired claim.
const claimableSQL = `(EXISTS (SELECT 1 FROM mail d WHERE d.status = 'sending' AND d.locked_until < now()
          AND d.send_started_at IS NULL AND NOT d.cancel_requested)
      OR EXISTS (SELECT 1 FROM mail d WHERE d.status = 'pending' AND NOT d.cancel_requested AND d.send_after <= now()
          AND d.lane = 1 AND d.attach_state IS DISTINCT FROM 'pending')
      OR EXISTS (SELECT 1 FROM mail d WHERE d.status = 'pending' AND NOT d.cancel_requested AND d.send_after <= now()
          AND d.lane = 0 AND d.attach_state IS DISTINCT FROM 'pending'))`

// ClaimMails takes up to p.Limit due rows in one short autocommit
// statement: due `pending` rows and `sending` rows whose lease expired
// before their claim started a send, never rows with cancel_requested, skipping rows other claimers hold. Each
// taken row becomes `sending` with attempts+1 (the fencing token),
// locked_until and locked_by set. Rows come back in no particular order.
// Errors are classified (a transient *mailtype.Error with ReasonDatabase
// when the database is unreachable).
func (s *Store) ClaimMails(ctx context.Context, p ClaimParams) ([]ClaimedMail, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("claim mails: limit %d must be positive", p.Limit)
	}
	rows, err := s.pool.Query(ctx, claimSQL, p.Limit, p.Lease, p.Worker, p.PriorityRows())
	if err != nil {
		return nil, fmt.Errorf("claim mails: %w", interpretError(err))
	}
	defer rows.Close()
	out := make([]ClaimedMail, 0, p.Limit)
	for rows.Next() {
		var m ClaimedMail
		if err := rows.Scan(&m.ID, &m.Token, &m.Reclaimed, &m.EventID, &m.DedupeKey, &m.OrderID,
			&m.Template, &m.Locale, &m.ToEmail, &m.ToName, &m.From, &m.ReplyTo, &m.IdempotencyKey,
			&m.Sends, &m.Ambiguous, &m.Subject, &m.BodyText, &m.BodyHTML,
			&m.MessageID, &m.CreatedAt, &m.FirstAttemptAt, &m.LockedUntil, &m.OccurredAt,
			&m.Suppressed, &m.Provider, &m.TraceContext, &m.Lane, &m.HasAttachments, &m.Revision); err != nil {
			return nil, fmt.Errorf("claim mails: scan: %w", interpretError(err))
		}
		m.Legacy = m.From == ""
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim mails: %w", interpretError(err))
	}
	rows.Close()
	if err := s.loadAttachments(ctx, out); err != nil {
		return nil, fmt.Errorf("claim mails: %w", err)
	}
	return out, nil
}

// renewManySQL: `m.id = ANY($1)` and the status compared after a
// concatenation with the empty string make the rows an index scan of the
// primary key whatever the join's estimate (see markStartedSQL).
const renewManySQL = `
UPDATE mail m SET locked_until = now() + $3::interval, updated_at = now()
FROM unnest($1::bigint[], $2::int[]) AS f(id, token)
WHERE m.id = ANY ($1::bigint[]) AND m.id = f.id AND m.status || '' = 'sending' AND m.attempts = f.token
RETURNING m.id, m.attempts`

// RenewLeases extends the leases of many claimed rows in one statement
// (now() + lease, database clock) and returns the fences it renewed; a
// fence missing from the result no longer holds (the lease was lost).
func (s *Store) RenewLeases(ctx context.Context, fs []Fence, lease time.Duration) ([]Fence, error) {
	ids := make([]int64, len(fs))
	tokens := make([]int32, len(fs))
	for i, f := range fs {
		ids[i], tokens[i] = f.ID, int32(f.Token)
	}
	rows, err := s.pool.Query(ctx, renewManySQL, ids, tokens, lease)
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(fs), interpretError(err))
	}
	renewed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fence, error) {
		var f Fence
		err := r.Scan(&f.ID, &f.Token)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(fs), interpretError(err))
	}
	return renewed, nil
}
