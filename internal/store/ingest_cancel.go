package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// cancelSQL is the whole cancel of one revision of one order's
// confirmation in one statement; docs/contract.md has the outcome table it
// implements. $1 order id, $2 cancel event id, $3 the confirmation key of
// the revision, $4 the confirmation template, $5 the revision.
//   - tomb: a cancelled tombstone (event_id NULL) for the confirmation key
//     when no row holds that key, so a later OrderConfirmed creates nothing;
//   - upd: for every mail of the template and revision (the confirmation
//     and its resends; never a cancellation notice, never another
//     revision): pending or held -> cancelled; sending -> cancel_requested only,
//     with no event yet: the sender's outcome decides (a release or a
//     failure ends cancelled, a send that was or may have been delivered
//     reports EmailCancelTooLate after its own outcome); sent and unknown
//     record the cancel event id and are too late; failed only records it
//     (nothing to stop, nothing published, but `mail resend` refuses the
//     order from then on). A pending mail whose earlier send was
//     ambiguous may have been delivered: it is not retried but ends
//     unknown (EmailUnknown, then EmailCancelTooLate), never cancelled.
//     Cancelled rows, a sending row already cancel_requested and rows that
//     already hold a cancel event id are not matched, so a redelivered
//     cancel changes and reports nothing;
//   - raced: the tombstone hit a row this statement's snapshot cannot see
//     (an OrderConfirmed committed while we ran), so upd missed it; the
//     caller runs the statement again with a fresh snapshot.
const cancelSQL = `
WITH tomb AS (
    INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id, revision)
    VALUES ($3, $1, $4, 'cancelled', $2::uuid, $5)
    ON CONFLICT DO NOTHING
    RETURNING dedupe_key, template, status, sends, provider, provider_message_id
), upd AS (
    UPDATE mail SET
        status           = CASE WHEN status = 'pending' AND ambiguous > 0 THEN 'unknown'
                                WHEN status IN ('pending', 'held') THEN 'cancelled' ELSE status END,
        cancel_requested = cancel_requested OR status = 'sending' OR (status = 'pending' AND ambiguous > 0),
        cancel_event_id  = $2::uuid,
        updated_at       = CASE WHEN status IN ('pending', 'held', 'sending') THEN now() ELSE updated_at END
    WHERE order_id = $1 AND template = $4 AND revision = $5
      AND (status IN ('pending', 'held')
           OR (status = 'sending' AND NOT cancel_requested)
           OR (status IN ('sent', 'unknown', 'failed') AND cancel_event_id IS NULL))
    RETURNING dedupe_key, template, status, sends, provider, provider_message_id,
        status = 'unknown' AND cancel_requested AS stopped_ambiguous
)
SELECT 'tombstoned', dedupe_key, template, status, 0, coalesce(provider, ''), coalesce(provider_message_id, '')
FROM tomb
UNION ALL
SELECT CASE WHEN status = 'cancelled' THEN 'cancelled' WHEN stopped_ambiguous THEN 'stopped_ambiguous'
            WHEN status = 'sending' THEN 'requested' WHEN status = 'failed' THEN 'noted' ELSE 'too_late' END,
       dedupe_key, template, status, sends, coalesce(provider, ''), coalesce(provider_message_id, '')
FROM upd
UNION ALL
SELECT 'raced', $3, '', '', 0, '', ''
WHERE NOT EXISTS (SELECT 1 FROM tomb) AND NOT EXISTS (SELECT 1 FROM mail WHERE dedupe_key = $3)`

// stoppedAmbiguous is cancelSQL's kind of a pending mail whose earlier
// send was ambiguous: the cancel ends it unknown.
const stoppedAmbiguous mailtype.Disposition = "stopped_ambiguous"

// cancelRequested is cancelSQL's kind of a claimed mail: the cancel only
// sets cancel_requested. The sender's outcome reports it: a claim that
// never started or a send that failed ends cancelled (EmailCancelled); a
// send that was, or may have been, delivered ends sent or unknown with its
// own event, then EmailCancelTooLate and the cancellation notice.
const cancelRequested mailtype.Disposition = "requested"

// cancelNoted is cancelSQL's kind of a failed mail: the cancel is recorded
// (so `mail resend` refuses the order) and nothing is published.
const cancelNoted mailtype.Disposition = "noted"

// cancelledAmbiguousError is the error of the EmailUnknown of a mail
// whose retry of an ambiguous send a cancel stopped.
const cancelledAmbiguousError = "cancelled while waiting to retry an ambiguous send; the mail may have been delivered"

// maxCancelRaces bounds how often one cancel re-runs after racing a
// concurrent insert of its confirmation key; each race needs a new
// confirmation committing in the same instant, so 3 is plenty.
const maxCancelRaces = 3

// cancelRow is one mail a cancel changed.
type cancelRow struct {
	kind                        mailtype.Disposition
	dedupeKey, template, status string
	attempts                    int
	provider, providerMessageID string
}

// cancel runs cancelSQL for c (again after a race), writes the feedback of
// every mail it settled (EmailCancelled for a tombstone or a cancelled
// pending mail; EmailCancelTooLate for a sent or unknown one, after
// EmailUnknown for a pending one that an ambiguous send may have
// delivered), writes the cancellation notice when it was too late (see
// insertNotice), and returns the strongest outcome: tombstoned,
// cancelled (a claimed mail counts here: its cancel is requested), too_late,
// or duplicate when nothing changed.
func (s *Store) cancel(ctx context.Context, tx pgx.Tx, c Cancel) (IngestResult, error) {
	var changed []cancelRow
	for race := 0; ; race++ {
		rows, raced, err := cancelOnce(ctx, tx, c)
		if err != nil {
			return IngestResult{}, err
		}
		changed = append(changed, rows...)
		if !raced {
			break
		}
		if race == maxCancelRaces {
			return IngestResult{}, mailtype.Errorf(mailtype.Transient, mailtype.ReasonDatabase, "cancel of order %s raced %d concurrent inserts", c.OrderID, race)
		}
	}
	res := IngestResult{Disposition: mailtype.DispositionDuplicate}
	notice := ""
	for _, r := range changed {
		switch r.kind {
		case cancelRequested:
			res.Disposition = strongest(res.Disposition, mailtype.DispositionCancelled)
			continue
		case cancelNoted:
			continue
		}
		f := Feedback{
			Type: mailtype.EmailCancelled, DedupeKey: r.dedupeKey, OrderID: c.OrderID, Revision: c.Revision,
			Template: r.template, Status: mailtype.Status(r.status), Attempts: r.attempts, Provider: r.provider,
			ProviderMessageID: r.providerMessageID, SourceEventID: c.EventID, TraceContext: c.TraceContext,
		}
		if r.kind == stoppedAmbiguous {
			u := f
			u.Type, u.ErrorClass, u.ErrorReason = mailtype.EmailUnknown, mailtype.Ambiguous, mailtype.ReasonCancelledAmbiguous
			u.Error = cancelledAmbiguousError
			if err := s.insertFeedback(ctx, tx, u); err != nil {
				return IngestResult{}, err
			}
			res.Feedback++
			r.kind = mailtype.DispositionTooLate
		}
		if r.kind == mailtype.DispositionTooLate {
			f.Type = mailtype.EmailCancelTooLate
			notice = r.dedupeKey
		}
		if err := s.insertFeedback(ctx, tx, f); err != nil {
			return IngestResult{}, err
		}
		res.Feedback++
		res.Disposition = strongest(res.Disposition, r.kind)
	}
	if notice != "" {
		written, err := s.insertNotice(ctx, tx, notice, c.TraceContext)
		if err != nil {
			return IngestResult{}, err
		}
		res.Notice = written
	}
	return res, nil
}

func cancelOnce(ctx context.Context, tx pgx.Tx, c Cancel) (changed []cancelRow, raced bool, err error) {
	rev := revisionOr1(c.Revision)
	rows, err := tx.Query(ctx, cancelSQL, c.OrderID, c.EventID, mailtype.ConfirmationKeyAt(c.OrderID, rev), c.Template, rev)
	if err != nil {
		return nil, false, fmt.Errorf("cancel order %s: %w", c.OrderID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r cancelRow
		var kind string
		if err := rows.Scan(&kind, &r.dedupeKey, &r.template, &r.status, &r.attempts, &r.provider, &r.providerMessageID); err != nil {
			return nil, false, fmt.Errorf("scan cancel of order %s: %w", c.OrderID, err)
		}
		if kind == "raced" {
			raced = true
			continue
		}
		r.kind = mailtype.Disposition(kind)
		changed = append(changed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("cancel order %s: %w", c.OrderID, err)
	}
	return changed, raced, nil
}

// strongest picks the outcome one cancel event is counted as when it
// changed several mails: tombstoned > cancelled > too_late > duplicate.
func strongest(a, b mailtype.Disposition) mailtype.Disposition {
	rank := map[mailtype.Disposition]int{
		mailtype.DispositionDuplicate: 0, mailtype.DispositionTooLate: 1,
		mailtype.DispositionCancelled: 2, mailtype.DispositionTombstoned: 3,
	}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
