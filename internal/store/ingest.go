package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// NewMail is the mail row an OrderConfirmed event asks for, rendered once
// by the consumer so that every send attempt uses the same bytes.
type NewMail struct {
	// EventID is the input event's UUID (canonical text form).
	EventID string
	// DedupeKey is the business intent; at most one row per key exists.
	DedupeKey string
	OrderID   string
	// Revision is the order's revision (data.revision, >= 1; 0 is taken
	// as 1).
	Revision int
	Template string
	Locale   string
	ToEmail  string
	// Payload is the event's data object (JSON), kept for operators.
	Payload []byte
	// Subject, BodyText, BodyHTML and MessageID are the rendered mail.
	Subject, BodyText, BodyHTML, MessageID string
	// From, ToName (the cleaned display name), ReplyTo ("" for none) and
	// IdempotencyKey complete what every attempt puts on the wire; they are
	// stored so that a config change never alters a mail between attempts.
	From, ToName, ReplyTo, IdempotencyKey string
	OccurredAt                            time.Time
	// Stale marks an event older than its max age: the row is recorded as
	// failed (reason stale, so its dedupe key is taken) with an
	// EmailFailed feedback event, and never sent.
	Stale bool
	// MaxAge is the age limit that made the event stale, for the feedback
	// message.
	MaxAge time.Duration
	// TraceContext is the stored trace context (tracing.Encode) of the
	// span that recorded the event, written to trace_context and to the
	// outbox row of a stale mail; "" (NULL) while tracing is off.
	TraceContext string
	// Lane is the mail's priority lane (the template's settings.yaml
	// lane); the zero value is bulk.
	Lane mailtype.Lane
	// HasAttachments marks a mail whose event names attachments
	// (data.attachments): it is written waiting for them (attach_state
	// pending) and not claimed until the fetch stage has them.
	HasAttachments bool
}

// Cancel is an OrderCancelled event.
type Cancel struct {
	// EventID is the cancel event's UUID, written to cancel_event_id.
	EventID string
	OrderID string
	// Revision is the revision whose confirmation is cancelled (>= 1; 0 is
	// taken as 1): mails of other revisions of the order are not touched.
	Revision int
	// Template is the confirmation template: only its mails are cancelled
	// (never a cancellation notice), and a tombstone is written with it.
	Template string
	// TraceContext is the stored trace context of the span that recorded
	// the cancel; the feedback events and the cancellation notice it
	// writes carry it ("" for none).
	TraceContext string
}

// IngestItem is one input event to record: exactly one of Mail and Cancel
// is set.
type IngestItem struct {
	Mail   *NewMail
	Cancel *Cancel
}

// IngestResult is what recording one item did.
type IngestResult struct {
	Disposition mailtype.Disposition
	// Feedback is the number of outbox rows written for the item.
	Feedback int
	// Notice is set when a cancel wrote a pending cancellation notice.
	Notice bool
	// Leased is set when the mail was leased to this process as it was
	// written (IngestLeased): no claim is needed to send it.
	Leased bool
}

// querier is what a pool and a transaction share.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// dbtx is what statements inside a transaction run on: a pgx.Tx, or the
// *pgx.Conn of a transaction begun in a pipelined batch (finishPipelined).
type dbtx interface {
	querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Ingest records items, in order, atomically: either every item is
// recorded and committed when Ingest returns nil, or nothing is. Items are
// grouped into as few statements as their order allows (a run of mails is
// one multi-row INSERT ... ON CONFLICT DO NOTHING); a batch of fresh mails
// only is a single autocommit statement, anything else one transaction.
//
// Outcomes: a mail is inserted, held (over the per-recipient limit, see
// RecipientLimit), stale (recorded as failed + EmailFailed) or
// duplicate (its event_id or dedupe_key exists, nothing written); a cancel
// is tombstoned, cancelled, too_late (feedback written as docs/contract.md,
// "What a cancel does" says) or duplicate (nothing left to change: already cancelled,
// failed, or a redelivered cancel).
//
// Every item must have passed IngestItem.Check. Errors are transient
// (mailtype.ReasonDatabase), never permanent: whatever PostgreSQL refuses
// of checked items is the statement's fault or the database's state, not
// an event's; a refusal carries a *RefusedError with its SQLSTATE. A
// context error comes back as it is. Safe for concurrent use.
func (s *Store) Ingest(ctx context.Context, items []IngestItem) ([]IngestResult, error) {
	res, _, err := s.IngestLeased(ctx, items, IngestLease{})
	return res, err
}

// IngestLease is what an insert leases to the process that writes it, so
// that the rows are handed to its sender in memory, with no claim and no
// re-read (docs/design.md, "Rows handed over in memory"): at most Max of
// the batch's mails, in order, each a fresh pending mail with its
// envelope (From set) and without attachments, are written `sending` as a
// claim would write them (attempts 1, locked_until now() + Lease on the
// database clock, locked_by Worker, first_claimed_at now()). A mail over
// the per-recipient limit is written held and not leased, and none is
// leased while a claim would take a row (claimableSQL): an older due row
// goes first. Max 0 leases nothing.
type IngestLease struct {
	Max    int
	Lease  time.Duration
	Worker string
}

// IngestLeased is Ingest, and it leases mails as l says when the batch is
// fresh mails only (a batch with a cancel or a stale mail leases nothing)
// and returns the leased rows as a claim would (ClaimedMail, Reclaimed
// false), their IngestResult marked Leased. A leased row that is never
// sent (its process died) is reclaimed silently once its lease expires,
// as any claim whose send never started.
func (s *Store) IngestLeased(ctx context.Context, items []IngestItem, l IngestLease) ([]IngestResult, []ClaimedMail, error) {
	res := make([]IngestResult, len(items))
	if len(items) == 0 {
		return res, nil, nil
	}
	var err error
	var leased []ClaimedMail
	if needsTx(items) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.ingestTx(ctx, tx, items, res) })
	} else {
		leased, err = insertMails(ctx, s.pool, s.recipientLimit, l, items, res)
	}
	if err != nil {
		return nil, nil, interpretError(err)
	}
	return res, leased, nil
}

// needsTx reports whether items need more than one statement.
func needsTx(items []IngestItem) bool {
	for _, it := range items {
		if it.Cancel != nil || it.Mail.Stale {
			return true
		}
	}
	return false
}

// ingestTx records items inside tx, one statement per run of mails and
// one per cancel, in arrival order so that a cancel that arrived before
// its confirmation tombstones it.
func (s *Store) ingestTx(ctx context.Context, tx pgx.Tx, items []IngestItem, res []IngestResult) error {
	for i := 0; i < len(items); {
		if c := items[i].Cancel; c != nil {
			r, err := s.cancel(ctx, tx, *c)
			if err != nil {
				return err
			}
			res[i] = r
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].Mail != nil {
			j++
		}
		if _, err := insertMails(ctx, tx, s.recipientLimit, IngestLease{}, items[i:j], res[i:j]); err != nil {
			return err
		}
		if err := s.staleFeedback(ctx, tx, items[i:j], res[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

const insertMailsSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
                  subject, body_text, body_html, message_id, status, last_error, last_error_class,
                  from_addr, to_name, reply_to, idempotency_key, trace_context, occurred_at, revision, lane,
                  attach_state, attach_next_at, ` + leasedColumns + `)
SELECT e, k, o, t, l, m, p::jsonb, s, bt, bh, mid, x.status, nullif(le, ''), nullif(lc, ''), fa, tn, rt, ik, nullif(tc, ''), oa, rev, ln,
       ` + attachStateExpr + `,
       ` + leasedValues + `
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
            $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::timestamptz[], $21::int[],
            $22::smallint[], $23::bool[])
     AS u(e, k, o, t, l, m, p, s, bt, bh, mid, st, le, lc, fa, tn, rt, ik, tc, oa, rev, ln, att)
CROSS JOIN LATERAL (SELECT CASE WHEN st = 'sending' AND ` + claimableSQL + ` THEN 'pending' ELSE st END AS status) x
ON CONFLICT DO NOTHING
RETURNING ` + insertedColumns

// leasedColumns, leasedValues and insertedColumns are what an insert adds
// for the rows it leases to the process that writes them (Lease, status
// 'sending' from the SELECT's x.status): the claim's columns, set as a
// claim sets them, the lease $24 (an interval) and the worker $25; and
// what the insert returns of every row, with the lease end, the
// suppression probe the claim makes (suppressedExpr) and the row's
// created_at for a leased one.
const (
	leasedColumns = `attempts, locked_until, locked_by, first_claimed_at`
	leasedValues  = `(x.status = 'sending')::int, CASE WHEN x.status = 'sending' THEN now() + $24::interval END,
       CASE WHEN x.status = 'sending' THEN $25 END, CASE WHEN x.status = 'sending' THEN now() END`
	insertedColumns = `event_id::text, dedupe_key, status, id, attempts, COALESCE(locked_until, now()), created_at,
    status = 'sending' AND ` + suppressedExpr
)

// suppressedExpr says whether the recipient of the mail row in scope
// (its to_email) is on the suppression list now (compared as
// mailsvc_address_key normalises them, migration 00090): a scalar
// subquery, one probe of the list's primary key whatever the statistics
// say (an EXISTS may be planned as a hash of the whole list).
const suppressedExpr = `COALESCE((SELECT true FROM suppression s WHERE s.address = mailsvc_address_key(to_email)
                  AND (s.expires_at IS NULL OR s.expires_at > now())), false)`

// insertLimitedMailsSQL is insertMailsSQL with the per-recipient safety
// limit ($26 mails per window of $27 seconds, on the database's clock):
// w adds the batch's pending mails to each recipient's window count
// (recipient_window, the address lower-cased) in recipient order, so that
// two replicas lock the same rows in the same order and never deadlock,
// and its row lock orders them: the limit holds across replicas. A
// pending (or leased) mail whose rank among its recipient's mails in this
// window (the count before the batch plus its rank in the batch) exceeds
// the limit is inserted held, not leased. A duplicate that ON CONFLICT skips has been
// counted: the count errs towards holding, never towards sending.
const insertLimitedMailsSQL = `
WITH u AS (
    SELECT u.*, lower(m) AS r, st IN ('pending', 'sending') AS due,
           row_number() OVER (PARTITION BY lower(m), st IN ('pending', 'sending') ORDER BY ord) AS nth,
           count(*) OVER (PARTITION BY lower(m), st IN ('pending', 'sending')) AS n
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::timestamptz[], $21::int[],
                $22::smallint[], $23::bool[])
         WITH ORDINALITY AS u(e, k, o, t, l, m, p, s, bt, bh, mid, st, le, lc, fa, tn, rt, ik, tc, oa, rev, ln, att, ord)
), w AS (
    INSERT INTO recipient_window AS w (recipient, window_start, mails)
    SELECT r, to_timestamp(floor(extract(epoch FROM now()) / $27::int) * $27::int), count(*)
    FROM u WHERE due GROUP BY r ORDER BY r
    ON CONFLICT (recipient, window_start) DO UPDATE SET mails = w.mails + excluded.mails
    RETURNING recipient, mails
)
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
                  subject, body_text, body_html, message_id, status, last_error, last_error_class,
                  from_addr, to_name, reply_to, idempotency_key, trace_context, occurred_at, revision, lane,
                  attach_state, attach_next_at, ` + leasedColumns + `)
SELECT e, k, o, t, l, m, p::jsonb, s, bt, bh, mid, x.status,
       nullif(le, ''), nullif(lc, ''), fa, tn, rt, ik, nullif(tc, ''), oa, rev, ln,
       ` + attachStateExpr + `,
       ` + leasedValues + `
FROM u LEFT JOIN w ON w.recipient = u.r AND u.due
CROSS JOIN LATERAL (SELECT CASE WHEN u.due AND w.mails - n + nth > $26::int THEN 'held'
    WHEN st = 'sending' AND ` + claimableSQL + ` THEN 'pending' ELSE st END AS status) x
ORDER BY ord
ON CONFLICT DO NOTHING
RETURNING ` + insertedColumns

// RecipientLimit is the per-recipient safety limit (mail.recipient_limit,
// mail.recipient_limit_window): at most Mails mails for one address
// (compared lower-cased) are recorded pending in one fixed window of
// Window, aligned to the Unix epoch on the database's clock; the ones
// over it are recorded held. Mails 0 turns it off.
type RecipientLimit struct {
	Mails  int
	Window time.Duration
}

// on reports whether the limit applies.
func (l RecipientLimit) on() bool { return l.Mails > 0 && l.Window >= time.Second }

// insertMails inserts every item (all mails) in one statement, leasing
// mails as l says, and sets res[i] to inserted, held, stale or duplicate.
// A row conflicting on event_id or dedupe_key, with the table or with an
// earlier row of the same statement, is skipped. It returns the leased
// rows.
func insertMails(ctx context.Context, q querier, limit RecipientLimit, l IngestLease, items []IngestItem, res []IngestResult) ([]ClaimedMail, error) {
	args := append(insertMailsArgs(items, l.Max), l.Lease, l.Worker)
	sql := insertMailsSQL
	if limit.on() {
		sql = insertLimitedMailsSQL
		args = append(args, int32(limit.Mails), int32(limit.Window/time.Second))
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("insert mails: %w", err)
	}
	inserted, err := scanInserted(rows)
	if err != nil {
		return nil, err
	}
	reused, err := reusedEventIDs(ctx, q, items, inserted)
	if err != nil {
		return nil, err
	}
	var leased []ClaimedMail
	for i, it := range items {
		k := [2]string{it.Mail.EventID, it.Mail.DedupeKey}
		got := inserted[k]
		switch {
		case len(got) == 0 && reused[it.Mail.EventID] != "" && reused[it.Mail.EventID] != it.Mail.DedupeKey:
			res[i] = IngestResult{Disposition: mailtype.DispositionEventIDReused}
		case len(got) == 0:
			res[i] = IngestResult{Disposition: mailtype.DispositionDuplicate}
		case it.Mail.Stale:
			res[i] = IngestResult{Disposition: mailtype.DispositionStale}
		case got[0].status == string(mailtype.StatusHeld):
			res[i] = IngestResult{Disposition: mailtype.DispositionHeld}
		case got[0].status == string(mailtype.StatusSending):
			res[i] = IngestResult{Disposition: mailtype.DispositionInserted, Leased: true}
			leased = append(leased, got[0].claimed(it.Mail))
		default:
			res[i] = IngestResult{Disposition: mailtype.DispositionInserted}
		}
		if len(got) > 0 {
			inserted[k] = got[1:] // an identical later item in the batch is the duplicate
		}
	}
	return leased, nil
}

// insertedRow is one row an insert of mails returned (insertedColumns).
type insertedRow struct {
	status      string
	id          int64
	token       int
	lockedUntil time.Time
	createdAt   time.Time
	suppressed  bool
}

// scanInserted reads insertedColumns, by event id and dedupe key.
func scanInserted(rows pgx.Rows) (map[[2]string][]insertedRow, error) {
	defer rows.Close()
	inserted := map[[2]string][]insertedRow{}
	for rows.Next() {
		var k [2]string
		var r insertedRow
		if err := rows.Scan(&k[0], &k[1], &r.status, &r.id, &r.token, &r.lockedUntil, &r.createdAt, &r.suppressed); err != nil {
			return nil, fmt.Errorf("scan inserted mail: %w", err)
		}
		inserted[k] = append(inserted[k], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert mails: %w", err)
	}
	return inserted, nil
}

// claimed is the leased row r of m as a claim returns it.
func (r insertedRow) claimed(m *NewMail) ClaimedMail {
	return ClaimedMail{Fence: Fence{ID: r.id, Token: r.token}, EventID: m.EventID, DedupeKey: m.DedupeKey,
		OrderID: m.OrderID, Template: m.Template, Locale: m.Locale, ToEmail: m.ToEmail, ToName: m.ToName,
		From: m.From, ReplyTo: m.ReplyTo, IdempotencyKey: m.IdempotencyKey, Subject: m.Subject,
		BodyText: m.BodyText, BodyHTML: m.BodyHTML, MessageID: m.MessageID, CreatedAt: r.createdAt,
		FirstAttemptAt: r.createdAt, LockedUntil: r.lockedUntil, OccurredAt: m.OccurredAt, Suppressed: r.suppressed,
		TraceContext: m.TraceContext, Lane: m.Lane, Revision: revisionOr1(m.Revision)}
}

// insertMailsArgs are the 23 column arrays of insertMailsSQL; the first
// lease mails that may be leased (fresh, without attachments) are written
// sending.
func insertMailsArgs(items []IngestItem, lease int) []any {
	n := len(items)
	cols := make([][]string, 19)
	for c := range cols {
		cols[c] = make([]string, n)
	}
	occurred, revisions, lanes, attach := make([]time.Time, n), make([]int32, n), make([]int16, n), make([]bool, n)
	for i, it := range items {
		m := it.Mail
		status, lastErr, lastClass := string(mailtype.StatusPending), "", ""
		switch {
		case m.Stale:
			status, lastErr = string(mailtype.StatusFailed), string(mailtype.ReasonStale)+": event older than its max age"
			lastClass = string(mailtype.Permanent)
		case !m.HasAttachments && m.From != "" && lease > 0: // a row without From is a legacy row to a claim
			status = string(mailtype.StatusSending)
			lease--
		}
		payload := string(m.Payload)
		if payload == "" {
			payload = "{}"
		}
		for c, v := range []string{m.EventID, m.DedupeKey, m.OrderID, m.Template, m.Locale, m.ToEmail, payload,
			m.Subject, m.BodyText, m.BodyHTML, m.MessageID, status, lastErr, lastClass,
			m.From, m.ToName, m.ReplyTo, m.IdempotencyKey, m.TraceContext} {
			cols[c][i] = v
		}
		occurred[i], revisions[i], lanes[i] = m.OccurredAt, int32(revisionOr1(m.Revision)), int16(m.Lane)
		attach[i] = m.HasAttachments
	}
	args := make([]any, 0, 25)
	for _, c := range cols {
		args = append(args, c)
	}
	return append(args, occurred, revisions, lanes, attach)
}

// reusedEventIDsSQL reads the intent (dedupe_key) each event id already
// names.
const reusedEventIDsSQL = `SELECT event_id::text, dedupe_key FROM mail WHERE event_id = ANY ($1::uuid[])`

// reusedEventIDs returns, for the items the insert skipped (nothing
// inserted under their event id and key), the dedupe_key the row holding
// their event_id has: a key other than the item's means a producer reused
// an event id for another intent (docs/contract.md, "Input"). One more
// statement, only in a batch with a skipped item (a redelivery, usually).
func reusedEventIDs(ctx context.Context, q querier, items []IngestItem, inserted map[[2]string][]insertedRow) (map[string]string, error) {
	var ids []string
	for _, it := range items {
		if _, ok := inserted[[2]string{it.Mail.EventID, it.Mail.DedupeKey}]; !ok {
			ids = append(ids, it.Mail.EventID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, reusedEventIDsSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read the intents of skipped event ids: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var p [2]string
		err := r.Scan(&p[0], &p[1])
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the intents of skipped event ids: %w", err)
	}
	m := make(map[string]string, len(out))
	for _, p := range out {
		m[p[0]] = p[1]
	}
	return m, nil
}

// revisionOr1 is r, or 1 for an unset revision.
func revisionOr1(r int) int { return max(r, 1) }

// staleFeedback writes EmailFailed (reason stale) for every stale mail
// that insertMails recorded.
func (s *Store) staleFeedback(ctx context.Context, tx pgx.Tx, items []IngestItem, res []IngestResult) error {
	for i, it := range items {
		if res[i].Disposition != mailtype.DispositionStale {
			continue
		}
		m := it.Mail
		err := s.insertFeedback(ctx, tx, Feedback{
			Type: mailtype.EmailFailed, DedupeKey: m.DedupeKey, OrderID: m.OrderID, Template: m.Template,
			Status: mailtype.StatusFailed, SourceEventID: m.EventID,
			ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonStale,
			Error:        fmt.Sprintf("event occurred at %s, older than the max event age %s", m.OccurredAt.UTC().Format(time.RFC3339), m.MaxAge),
			TraceContext: m.TraceContext,
		})
		if err != nil {
			return err
		}
		res[i].Feedback = 1
	}
	return nil
}
