package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// cancelSQL is the whole cancel of one order in one statement
// (DESIGN.md section 5):
//   - tomb: a cancelled tombstone (event_id NULL) for the confirmation key
//     when no row holds that key, so a later OrderConfirmed creates nothing;
//   - upd: for every mail of the order, pending -> cancelled, sending ->
//     cancel_requested (too late only once its send started; before that
//     the sender releases it as cancelled), and sent/unknown only records the cancel event id
//     (its status stays). A pending mail whose earlier send was ambiguous
//     may have been delivered: it is not retried but ends unknown
//     (EmailUnknown, then EmailCancelTooLate), never cancelled. failed and cancelled rows, a sending row already
//     cancel_requested and a sent row already told "too late" are not
//     matched, so a redelivered cancel changes and reports nothing;
//   - raced: the tombstone hit a row this statement's snapshot cannot see
//     (an OrderConfirmed committed while we ran), so upd missed it; the
//     caller runs the statement again with a fresh snapshot.
const cancelSQL = `
WITH tomb AS (
    INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id)
    VALUES ($3, $1, $4, 'cancelled', $2::uuid)
    ON CONFLICT DO NOTHING
    RETURNING dedupe_key, template, status, attempts, provider, provider_message_id
), upd AS (
    UPDATE mail SET
        status           = CASE WHEN status = 'pending' AND ambiguous > 0 THEN 'unknown'
                                WHEN status = 'pending' THEN 'cancelled' ELSE status END,
        cancel_requested = cancel_requested OR status = 'sending' OR (status = 'pending' AND ambiguous > 0),
        cancel_event_id  = $2::uuid,
        updated_at       = CASE WHEN status IN ('pending', 'sending') THEN now() ELSE updated_at END
    WHERE order_id = $1
      AND (status = 'pending'
           OR (status = 'sending' AND NOT cancel_requested)
           OR (status IN ('sent', 'unknown') AND cancel_event_id IS NULL))
    RETURNING dedupe_key, template, status, sends, provider, provider_message_id,
        status = 'unknown' AND cancel_requested AS stopped_ambiguous,
        status = 'sending' AND send_started_at IS NULL AS unstarted
)
SELECT 'tombstoned', dedupe_key, template, status, 0, coalesce(provider, ''), coalesce(provider_message_id, '')
FROM tomb
UNION ALL
SELECT CASE WHEN status = 'cancelled' THEN 'cancelled' WHEN stopped_ambiguous THEN 'stopped_ambiguous'
            WHEN unstarted THEN 'requested' ELSE 'too_late' END,
       dedupe_key, template, status, sends, coalesce(provider, ''), coalesce(provider_message_id, '')
FROM upd
UNION ALL
SELECT 'raced', $3, '', '', 0, '', ''
WHERE NOT EXISTS (SELECT 1 FROM tomb) AND NOT EXISTS (SELECT 1 FROM mail WHERE dedupe_key = $3)`

// stoppedAmbiguous is cancelSQL's kind of a pending mail whose earlier
// send was ambiguous: the cancel ends it unknown.
const stoppedAmbiguous mailtype.Outcome = "stopped_ambiguous"

// cancelBeforeStart is cancelSQL's kind of a claimed mail whose send has
// not started: the cancel only sets cancel_requested, and the sender
// ends it cancelled (EmailCancelled) without handing it over.
const cancelBeforeStart mailtype.Outcome = "requested"

// maxCancelRaces bounds how often one cancel re-runs after racing a
// concurrent insert of its confirmation key; each race needs a new
// confirmation committing in the same instant, so 3 is plenty.
const maxCancelRaces = 3

// cancelRow is one mail a cancel changed.
type cancelRow struct {
	kind                        mailtype.Outcome
	dedupeKey, template, status string
	attempts                    int
	provider, providerMessageID string
}

// cancel runs cancelSQL for c (again after a race), writes one feedback row
// per mail it changed (EmailCancelled for a tombstone or a cancelled
// pending mail, EmailCancelTooLate for a sending, sent or unknown one), and
// returns the strongest outcome: tombstoned, cancelled, too_late, or
// duplicate when nothing changed.
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
	res := IngestResult{Outcome: mailtype.OutcomeDuplicate}
	for _, r := range changed {
		if r.kind == cancelBeforeStart {
			// The sender's mark refuses it; its release reports EmailCancelled.
			res.Outcome = strongest(res.Outcome, mailtype.OutcomeCancelled)
			continue
		}
		f := Feedback{
			Type: mailtype.EmailCancelled, DedupeKey: r.dedupeKey, OrderID: c.OrderID, Template: r.template,
			Status: mailtype.Status(r.status), Attempts: r.attempts, Provider: r.provider,
			ProviderMessageID: r.providerMessageID, SourceEventID: c.EventID,
		}
		if r.kind == stoppedAmbiguous {
			u := f
			u.Type, u.ErrorClass, u.ErrorReason = mailtype.EmailUnknown, mailtype.Ambiguous, mailtype.ReasonCancelledAmbiguous
			u.Error = "cancelled while waiting to retry an ambiguous send; the mail may have been delivered"
			if err := s.insertFeedback(ctx, tx, u); err != nil {
				return IngestResult{}, err
			}
			res.Feedback++
			r.kind = mailtype.OutcomeTooLate
		}
		if r.kind == mailtype.OutcomeTooLate {
			f.Type = mailtype.EmailCancelTooLate
		}
		if err := s.insertFeedback(ctx, tx, f); err != nil {
			return IngestResult{}, err
		}
		res.Feedback++
		res.Outcome = strongest(res.Outcome, r.kind)
	}
	return res, nil
}

func cancelOnce(ctx context.Context, tx pgx.Tx, c Cancel) (changed []cancelRow, raced bool, err error) {
	rows, err := tx.Query(ctx, cancelSQL, c.OrderID, c.EventID, mailtype.ConfirmationKey(c.OrderID), c.Template)
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
		r.kind = mailtype.Outcome(kind)
		changed = append(changed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("cancel order %s: %w", c.OrderID, err)
	}
	return changed, raced, nil
}

// strongest picks the outcome one cancel event is counted as when it
// changed several mails: tombstoned > cancelled > too_late > duplicate.
func strongest(a, b mailtype.Outcome) mailtype.Outcome {
	rank := map[mailtype.Outcome]int{
		mailtype.OutcomeDuplicate: 0, mailtype.OutcomeTooLate: 1,
		mailtype.OutcomeCancelled: 2, mailtype.OutcomeTombstoned: 3,
	}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
