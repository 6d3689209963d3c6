package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// attachStateExpr is the attach_state and attach_next_at a new mail row
// is written with (insertMailsSQL): 'pending' and now() when its event
// names attachments (att, NewMail.HasAttachments, which the consumer knows
// from the event it decoded) and it is not failed already (a stale
// event), else NULL: the claim skips a pending one (docs/design.md,
// "Attachments"). A flag from Go, not a look into the payload: casting it
// to jsonb again cost PostgreSQL about 10 µs a mail on the ingest path.
const attachStateExpr = `CASE WHEN st <> 'failed' AND att THEN 'pending' END,
       CASE WHEN st <> 'failed' AND att THEN now() END`

// omittedAttachmentsSQL is the lateral join of insertOutboxManySQL: the
// file names (JSON array, event order) of the optional attachments a
// mail went without, for its EmailSent's data.omitted_attachments; NULL
// (the key left out) for any other event or a mail that omitted none. An
// index probe of mail's dedupe key, only for EmailSent rows.
const omittedAttachmentsSQL = `
    SELECT jsonb_agg(a.file_name ORDER BY a.idx) AS names
    FROM mail m JOIN mail_attachment a ON a.mail_id = m.id
    WHERE u.et = 'EmailSent' AND m.dedupe_key = u.k AND a.status = 'omitted'`

// Attachment statuses (mail_attachment.status).
const (
	AttachPending = "pending"
	AttachFetched = "fetched"
	AttachFailed  = "failed"
	AttachOmitted = "omitted"
)

// AttachmentRef is one attachment of a mail: the event's reference and
// the fetch's state.
type AttachmentRef struct {
	Index       int    `json:"-"`
	FileName    string `json:"file_name"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	// Size is the announced size in bytes.
	Size     int64 `json:"size"`
	Optional bool  `json:"optional"`
	// Status is one of AttachPending, AttachFetched, AttachFailed,
	// AttachOmitted.
	Status   string `json:"-"`
	Attempts int    `json:"-"`
}

// AttachJob is a mail the fetch stage took: its attachments to fetch.
type AttachJob struct {
	MailID    int64
	DedupeKey string
	// OccurredAt is when the event occurred: the fetch gives up when the
	// max event age counted from here runs out.
	OccurredAt time.Time
	// Pass is the fetch pass this is, from 1.
	Pass int
	Refs []AttachmentRef
}

// claimAttachSQL takes up to $1 mails waiting for their files, due now,
// through mail_attach_pending_idx, and leases them for $2 (attach_next_at
// moves on, so another replica's stage skips them meanwhile). On a mail's
// first pass it writes its mail_attachment rows from the stored payload.
const claimAttachSQL = `
WITH due AS MATERIALIZED (
    SELECT id FROM mail
    WHERE attach_state = 'pending' AND status IN ('pending', 'held') AND attach_next_at <= now()
      AND NOT cancel_requested
    ORDER BY attach_next_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), rows AS (
    INSERT INTO mail_attachment (mail_id, idx, file_name, content_type, url, sha256, size, optional)
    SELECT m.id, e.ord - 1, e.v->>'file_name', e.v->>'content_type', e.v->>'url', e.v->>'sha256',
           (e.v->>'size')::bigint, COALESCE((e.v->>'optional')::boolean, false)
    FROM mail m, jsonb_array_elements(m.payload->'attachments') WITH ORDINALITY AS e(v, ord)
    WHERE m.id = ANY (ARRAY(SELECT id FROM due))
    ON CONFLICT (mail_id, idx) DO NOTHING
)
UPDATE mail m SET attach_next_at = now() + $2::interval, attach_attempts = m.attach_attempts + 1
WHERE m.id = ANY (ARRAY(SELECT id FROM due))
RETURNING m.id, m.dedupe_key, COALESCE(m.occurred_at, m.created_at), m.attach_attempts, m.payload->'attachments'`

// attachStatusSQL reads the fetch state of the taken mails' attachments.
const attachStatusSQL = `
SELECT mail_id, idx, status, attempts FROM mail_attachment WHERE mail_id = ANY ($1::bigint[])`

// ClaimAttachJobs takes up to limit mails whose attachments wait to be
// fetched and are due, leasing each for lease, and returns them with
// their references and each reference's status.
func (s *Store) ClaimAttachJobs(ctx context.Context, limit int, lease time.Duration) ([]AttachJob, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("claim attachment jobs: limit %d must be positive", limit)
	}
	rows, err := s.pool.Query(ctx, claimAttachSQL, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim attachment jobs: %w", interpretError(err))
	}
	var jobs []AttachJob
	for rows.Next() {
		var j AttachJob
		var raw []byte
		if err := rows.Scan(&j.MailID, &j.DedupeKey, &j.OccurredAt, &j.Pass, &raw); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim attachment jobs: scan: %w", interpretError(err))
		}
		if err := json.Unmarshal(raw, &j.Refs); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim attachment jobs: mail %d: attachments: %w", j.MailID, err)
		}
		for i := range j.Refs {
			j.Refs[i].Index, j.Refs[i].Status = i, AttachPending
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim attachment jobs: %w", interpretError(err))
	}
	return jobs, s.attachStatus(ctx, jobs)
}

func (s *Store) attachStatus(ctx context.Context, jobs []AttachJob) error {
	if len(jobs) == 0 {
		return nil
	}
	byID := make(map[int64]*AttachJob, len(jobs))
	ids := make([]int64, len(jobs))
	for i := range jobs {
		byID[jobs[i].MailID], ids[i] = &jobs[i], jobs[i].MailID
	}
	rows, err := s.pool.Query(ctx, attachStatusSQL, ids)
	if err != nil {
		return fmt.Errorf("attachment status: %w", interpretError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var idx, attempts int
		var status string
		if err := rows.Scan(&id, &idx, &status, &attempts); err != nil {
			return fmt.Errorf("attachment status: scan: %w", interpretError(err))
		}
		if j := byID[id]; j != nil && idx < len(j.Refs) {
			j.Refs[idx].Status, j.Refs[idx].Attempts = status, attempts
		}
	}
	return rows.Err()
}

const saveFetchedSQL = `
UPDATE mail_attachment SET status = 'fetched', content = $3, fetched_at = now(), attempts = attempts + 1,
    reason = NULL, detail = NULL, updated_at = now()
WHERE mail_id = $1 AND idx = $2 AND status = 'pending'`

// SaveAttachment stores the verified bytes of attachment idx of mail
// mailID (status fetched). The row's CHECK refuses bytes whose length is
// not the announced size.
func (s *Store) SaveAttachment(ctx context.Context, mailID int64, idx int, content []byte) error {
	if _, err := s.pool.Exec(ctx, saveFetchedSQL, mailID, idx, content); err != nil {
		return fmt.Errorf("save attachment %d of mail %d: %w", idx, mailID, interpretError(err))
	}
	return nil
}

const noteFetchSQL = `
UPDATE mail_attachment SET attempts = attempts + 1, reason = $3, detail = $4, updated_at = now(),
    status = CASE WHEN $5::text = '' THEN status ELSE $5::text END
WHERE mail_id = $1 AND idx = $2 AND status = 'pending'`

// NoteAttachmentFailure records a failed fetch of attachment idx of mail
// mailID: its reason and detail, and status when not "" (AttachOmitted
// for an optional file given up, AttachFailed for a required one).
func (s *Store) NoteAttachmentFailure(ctx context.Context, mailID int64, idx int, reason, detail, status string) error {
	if _, err := s.pool.Exec(ctx, noteFetchSQL, mailID, idx, reason, mailtype.Sanitize(detail), status); err != nil {
		return fmt.Errorf("note attachment %d of mail %d: %w", idx, mailID, interpretError(err))
	}
	return nil
}

// attachReadySQL makes the mail claimable once none of its attachments is
// pending or failed; the wake-up is the sender's next poll.
const attachReadySQL = `
UPDATE mail SET attach_state = 'ready', attach_next_at = NULL, updated_at = now()
WHERE id = $1 AND attach_state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM mail_attachment WHERE mail_id = $1 AND status IN ('pending', 'failed'))`

// AttachmentsReady marks mail mailID's attachments ready (every file
// fetched or, optional, omitted): the claim may take it. It reports
// whether the mail changed.
func (s *Store) AttachmentsReady(ctx context.Context, mailID int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, attachReadySQL, mailID)
	if err != nil {
		return false, fmt.Errorf("attachments of mail %d ready: %w", mailID, interpretError(err))
	}
	return tag.RowsAffected() == 1, nil
}

const attachRetrySQL = `
UPDATE mail SET attach_next_at = now() + $2::interval WHERE id = $1 AND attach_state = 'pending'`

// RetryAttachments schedules mail mailID's next fetch pass after wait.
func (s *Store) RetryAttachments(ctx context.Context, mailID int64, wait time.Duration) error {
	if _, err := s.pool.Exec(ctx, attachRetrySQL, mailID, wait); err != nil {
		return fmt.Errorf("retry attachments of mail %d: %w", mailID, interpretError(err))
	}
	return nil
}

// failAttachSQL fails a mail whose required attachment could not be had:
// only while it is still waiting for its files (pending or held, not
// cancelled, never claimed: a pending attach_state keeps the claim off).
const failAttachSQL = `
UPDATE mail SET status = 'failed', attach_state = 'failed', attach_next_at = NULL,
    last_error = $2, last_error_class = 'permanent', updated_at = now()
WHERE id = $1 AND attach_state = 'pending' AND status IN ('pending', 'held') AND NOT cancel_requested
RETURNING dedupe_key, order_id, revision, template, COALESCE(event_id::text, ''), attempts, COALESCE(trace_context, '')`

// FailAttachments ends mail mailID `failed` with reason attachment and
// detail, and writes its EmailFailed in the same transaction (docs/design.md,
// "Invariants": outcome and event together). It reports whether the mail
// changed (false: cancelled or finished meanwhile).
func (s *Store) FailAttachments(ctx context.Context, mailID int64, detail string) (bool, error) {
	detail = mailtype.Sanitize(detail)
	failed := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		f := Feedback{Type: mailtype.EmailFailed, Status: mailtype.StatusFailed,
			ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonAttachment, Error: detail}
		err := tx.QueryRow(ctx, failAttachSQL, mailID, string(mailtype.ReasonAttachment)+": "+detail).
			Scan(&f.DedupeKey, &f.OrderID, &f.Revision, &f.Template, &f.SourceEventID, &f.Attempts, &f.TraceContext)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		failed = true
		return s.insertFeedback(ctx, tx, f)
	})
	if err != nil {
		return false, fmt.Errorf("fail mail %d for its attachment: %w", mailID, interpretError(err))
	}
	return failed, nil
}

// copyAttachmentsSQL gives a resend ($2, the new key) the attachments of
// the mail it copies ($1): the stored bytes themselves, so the resend
// sends what the original did whether or not the URL still works. A file
// the original failed to fetch is pending again in the copy, and so is the
// copy's attach_state unless every file is there (an original that never
// fetched its files, such as a stale one, gives a copy that fetches them:
// its payload names them).
const copyAttachmentsSQL = `
WITH src AS (SELECT id FROM mail WHERE dedupe_key = $1),
dst AS (SELECT id FROM mail WHERE dedupe_key = $2),
copied AS (
    INSERT INTO mail_attachment (mail_id, idx, file_name, content_type, url, sha256, size, optional,
                                 status, attempts, reason, detail, content, fetched_at)
    SELECT (SELECT id FROM dst), a.idx, a.file_name, a.content_type, a.url, a.sha256, a.size, a.optional,
           CASE WHEN a.status = 'failed' THEN 'pending' ELSE a.status END, a.attempts, a.reason, a.detail,
           a.content, a.fetched_at
    FROM mail_attachment a WHERE a.mail_id = (SELECT id FROM src)
    RETURNING status
)
UPDATE mail SET attach_state = CASE
        WHEN EXISTS (SELECT 1 FROM copied) AND NOT EXISTS (SELECT 1 FROM copied WHERE status = 'pending') THEN 'ready'
        ELSE 'pending' END,
    attach_next_at = now()
WHERE id = (SELECT id FROM dst)
  AND jsonb_typeof(payload->'attachments') = 'array' AND jsonb_array_length(payload->'attachments') > 0`

// copyAttachments runs copyAttachmentsSQL inside the resend's transaction.
func copyAttachments(ctx context.Context, tx pgx.Tx, from, to string) error {
	if _, err := tx.Exec(ctx, copyAttachmentsSQL, from, to); err != nil {
		return fmt.Errorf("copy attachments: %w", err)
	}
	return nil
}

// AttachmentFile is a stored, verified attachment as a provider sends
// it: the same bytes on every attempt, failover and resend.
type AttachmentFile struct {
	FileName    string
	ContentType string
	Content     []byte
}

const claimedAttachmentsSQL = `
SELECT mail_id, file_name, content_type, content FROM mail_attachment
WHERE mail_id = ANY ($1::bigint[]) AND status = 'fetched'
ORDER BY mail_id, idx`

// loadAttachments fills the Attachments of the claimed mails that have
// any (HasAttachments), in the order of the event's list; an omitted
// optional file is left out.
func (s *Store) loadAttachments(ctx context.Context, claimed []ClaimedMail) error {
	var ids []int64
	at := map[int64]int{}
	for i, m := range claimed {
		if m.HasAttachments {
			ids, at[m.ID] = append(ids, m.ID), i
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, claimedAttachmentsSQL, ids)
	if err != nil {
		return fmt.Errorf("load attachments: %w", interpretError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var f AttachmentFile
		if err := rows.Scan(&id, &f.FileName, &f.ContentType, &f.Content); err != nil {
			return fmt.Errorf("load attachments: scan: %w", interpretError(err))
		}
		claimed[at[id]].Attachments = append(claimed[at[id]].Attachments, f)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load attachments: %w", interpretError(err))
	}
	return nil
}

// AttachmentView is one attachment of a mail as `mail show` and the
// console show it: the reference, the fetch's state, and the last
// refusal.
type AttachmentView struct {
	FileName    string `json:"file_name"`
	ContentType string `json:"content_type"`
	// Size is the announced size, in bytes.
	Size     int64  `json:"size"`
	Optional bool   `json:"optional"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

const attachmentViewSQL = `
SELECT file_name, content_type, size, optional, status, attempts, COALESCE(reason, ''), COALESCE(detail, '')
FROM mail_attachment WHERE mail_id = $1 ORDER BY idx`

// attachmentsOf reads the attachments of mail id (none for most mails,
// and for a mail whose files the fetch stage has not looked at yet).
func (s *Store) attachmentsOf(ctx context.Context, id int64) ([]AttachmentView, error) {
	rows, err := s.pool.Query(ctx, attachmentViewSQL, id)
	if err != nil {
		return nil, fmt.Errorf("read attachments of mail %d: %w", id, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AttachmentView, error) {
		var a AttachmentView
		err := r.Scan(&a.FileName, &a.ContentType, &a.Size, &a.Optional, &a.Status, &a.Attempts, &a.Reason, &a.Detail)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read attachments of mail %d: %w", id, interpretError(err))
	}
	return out, nil
}
