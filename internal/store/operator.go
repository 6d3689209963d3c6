package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrWrongState is wrapped by every *StateError.
var ErrWrongState = errors.New("the mail's state does not allow this action")

// StateError says that an operator action was refused because of the
// mail's status. It wraps ErrWrongState.
type StateError struct {
	DedupeKey string
	// Status is the status that refused the action.
	Status mailtype.Status
	// Action is "resend" or "reconcile".
	Action string
	// Hint says what the operator can do instead.
	Hint string
}

func (e *StateError) Error() string {
	msg := fmt.Sprintf("cannot %s mail %s: it is %s", e.Action, e.DedupeKey, e.Status)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *StateError) Unwrap() error { return ErrWrongState }

// ResendSuffix separates a dedupe key from the number of its resend:
// the n-th resend of KEY is keyed KEY + ResendSuffix + n.
const ResendSuffix = ":resend:"

// resendRefusal returns the refusal for resending a mail in status st, or
// nil when a resend is allowed (sent and failed mails).
func resendRefusal(key string, st mailtype.Status) error {
	hint := ""
	switch st {
	case mailtype.StatusSent, mailtype.StatusFailed:
		return nil
	case mailtype.StatusPending, mailtype.StatusSending:
		hint = "it has not finished; wait for it (mailsvc mail show " + key + ")"
	case mailtype.StatusUnknown:
		hint = "it may have been delivered; decide with `mailsvc mail reconcile " + key + " --delivered|--not-delivered`"
	case mailtype.StatusCancelled:
		hint = "the order was cancelled"
	}
	return &StateError{DedupeKey: key, Status: st, Action: "resend", Hint: hint}
}

type resendSource struct {
	orderID, template, locale, toEmail, subject, text, html string
	from, toName, replyTo                                   string
	status                                                  mailtype.Status
	payload                                                 string
	revision                                                int
}

const lockForResendSQL = `
SELECT order_id, template, locale, to_email, payload::text, subject, body_text, body_html, status,
    from_addr, to_name, reply_to, revision
FROM mail WHERE dedupe_key = $1 FOR UPDATE`

// orderCancelledSQL tells whether a cancel reached the mails of template
// $2, revision $3 of order $1: a cancelled row (a tombstone, a cancelled
// mail) or a cancel event recorded on a sent, failed or unknown one.
const orderCancelledSQL = `
SELECT EXISTS (SELECT 1 FROM mail WHERE order_id = $1 AND template = $2 AND revision = $3
                 AND (status = 'cancelled' OR cancel_event_id IS NOT NULL))`

// resendSiblingsSQL reads the earlier resends of a key through the
// order_id index (resends copy the order id); $2 is a LIKE pattern.
const resendSiblingsSQL = `
SELECT dedupe_key, status FROM mail WHERE order_id = $1 AND (dedupe_key = $3 OR dedupe_key LIKE $2)`

// lockResendRootSQL serialises every resend of one family (a key and all
// resends of it and of its resends) on the family's first row.
const lockResendRootSQL = `SELECT 1 FROM mail WHERE dedupe_key = $1 FOR UPDATE`

// resendRoot is the key a resend family started from: dedupeKey up to its
// first ResendSuffix.
func resendRoot(dedupeKey string) string {
	if i := strings.Index(dedupeKey, ResendSuffix); i >= 0 {
		return dedupeKey[:i]
	}
	return dedupeKey
}

// insertResendSQL takes the payload ($7) as text: in the exec and
// simple_protocol query modes a []byte argument goes over as bytea, which
// jsonb refuses.
const insertResendSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload, subject,
                  body_text, body_html, message_id, status, occurred_at,
                  from_addr, to_name, reply_to, idempotency_key, revision, lane)
VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, $9, $10, $11, 'pending', now(), $12, $13, $14, $15, $16,
        1 /* mailtype.LanePriority: someone asked for it and is waiting */)`

// Resend creates a new pending mail, in the priority lane, keyed
// KEY:resend:N (N the next free number) with the content and envelope (From, display name, Reply-To) of
// the mail keyed dedupeKey, a fresh event id, a new Message-ID
// (mailtype.MessageID of the new key at domain) and a new idempotency key
// (mailtype.IdempotencyKey of the new key in namespace). The
// original row is locked but never changed, so concurrent resends of one
// key get distinct numbers. It returns the new key, ErrNotFound when no
// mail has dedupeKey, or a *StateError when the original is not sent or
// failed, is a tombstone, is a confirmation of an order revision that was
// cancelled (at any time, before or after it was sent), or an earlier
// resend of it is still pending or sending (a resend never risks a
// duplicate).
func (s *Store) Resend(ctx context.Context, dedupeKey, domain, namespace string) (string, error) {
	return s.resend(ctx, dedupeKey, domain, namespace, nil, true)
}

// ResendDryRun says what Resend would do, with the same new key and
// errors (the same refusals), and changes nothing: it runs the very same
// transaction and rolls it back.
func (s *Store) ResendDryRun(ctx context.Context, dedupeKey, domain, namespace string) (string, error) {
	return s.resend(ctx, dedupeKey, domain, namespace, nil, false)
}

func (s *Store) resend(ctx context.Context, dedupeKey, domain, namespace string, edit ResendEdit, commit bool) (string, error) {
	var newKey string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var src resendSource
		err := tx.QueryRow(ctx, lockForResendSQL, dedupeKey).Scan(&src.orderID, &src.template, &src.locale,
			&src.toEmail, &src.payload, &src.subject, &src.text, &src.html, &src.status,
			&src.from, &src.toName, &src.replyTo, &src.revision)
		if err != nil {
			return interpretError(err)
		}
		if err := resendRefusal(dedupeKey, src.status); err != nil {
			return err
		}
		if err := refuseCancelledOrder(ctx, tx, dedupeKey, src); err != nil {
			return err
		}
		if src.toEmail == "" {
			return &StateError{DedupeKey: dedupeKey, Status: src.status, Action: "resend", Hint: "it is a tombstone and has no content"}
		}
		if err := refuseSuppressed(ctx, tx, dedupeKey, src); err != nil {
			return err
		}
		if err := s.countResend(ctx, tx, dedupeKey, src); err != nil {
			return err
		}
		n, err := nextResend(ctx, tx, dedupeKey, src.orderID)
		if err != nil {
			return err
		}
		newKey = dedupeKey + ResendSuffix + strconv.Itoa(n)
		if err := src.edit(edit); err != nil {
			return err
		}
		if err := insertResend(ctx, tx, newKey, domain, namespace, src); err != nil {
			return err
		}
		if err := copyAttachments(ctx, tx, dedupeKey, newKey); err != nil || commit {
			return err
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return "", fmt.Errorf("resend %s: %w", dedupeKey, interpretError(err))
	}
	return newKey, nil
}

// refuseSuppressed returns a *StateError naming the entry when the
// mail's recipient is on the suppression list: a copy would only fail
// suppressed, and the operator should first see why it is there.
func refuseSuppressed(ctx context.Context, tx pgx.Tx, key string, src resendSource) error {
	var reason, source string
	err := tx.QueryRow(ctx, `SELECT reason, source FROM suppression WHERE address = mailsvc_address_key($1) AND `+activeSuppression, src.toEmail).
		Scan(&reason, &source)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return &StateError{DedupeKey: key, Status: src.status, Action: "resend", Hint: fmt.Sprintf(
		"its recipient is on the suppression list (%s: %s); remove it first with `mailsvc suppression remove ADDRESS` if the address works again",
		source, reason)}
}

// countResendSQL counts a resend in its recipient's window of the
// per-recipient safety limit, as ingest counts a new mail
// (insertLimitedMailsSQL): $1 the address, $2 the window in seconds.
const countResendSQL = `
INSERT INTO recipient_window AS w (recipient, window_start, mails)
VALUES (lower($1), to_timestamp(floor(extract(epoch FROM now()) / $2::int) * $2::int), 1)
ON CONFLICT (recipient, window_start) DO UPDATE SET mails = w.mails + 1
RETURNING mails`

// countResend counts the resend against the per-recipient safety limit
// (mail.recipient_limit), when it is on, and refuses it with a
// *StateError when it would pass the limit: a resend is a mail to the
// customer like any other, and a scripted operator token must not flood
// one address either. The refusal rolls the count back with the rest.
func (s *Store) countResend(ctx context.Context, tx pgx.Tx, key string, src resendSource) error {
	l := s.recipientLimit
	if !l.on() {
		return nil
	}
	var mails int
	if err := tx.QueryRow(ctx, countResendSQL, src.toEmail, int(l.Window.Seconds())).Scan(&mails); err != nil {
		return err
	}
	if mails <= l.Mails {
		return nil
	}
	return &StateError{DedupeKey: key, Status: src.status, Action: "resend", Hint: fmt.Sprintf(
		"its recipient has had %d mails in the current window of mail.recipient_limit_window (%s), and mail.recipient_limit is %d: "+
			"wait for the next window, or raise the limit if this is no flood", mails-1, l.Window, l.Mails)}
}

// nextResend returns the next free resend number of key, or a *StateError
// when another mail of its resend family (the original, any resend, or a
// resend of a resend) has not finished: one family never has two sends
// in flight.
func nextResend(ctx context.Context, tx pgx.Tx, key, orderID string) (int, error) {
	prefix := key + ResendSuffix
	root := resendRoot(key)
	if _, err := tx.Exec(ctx, lockResendRootSQL, root); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, resendSiblingsSQL, orderID, likePrefix(root+ResendSuffix), root)
	if err != nil {
		return 0, err
	}
	type sibling struct {
		key    string
		status mailtype.Status
	}
	sibs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sibling, error) {
		var sb sibling
		return sb, r.Scan(&sb.key, &sb.status)
	})
	if err != nil {
		return 0, err
	}
	highest := 0
	for _, sb := range sibs {
		if refusal := resendRefusal(sb.key, sb.status); refusal != nil && sb.status != mailtype.StatusCancelled {
			return 0, &StateError{DedupeKey: sb.key, Status: sb.status, Action: "resend",
				Hint: "this mail of the same resend family as " + key + " must end sent or failed before another one"}
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(sb.key, prefix)); err == nil {
			highest = max(highest, n) // else a resend of a resend: KEY:resend:1:resend:1
		}
	}
	return highest + 1, nil
}

// refuseCancelledOrder returns a *StateError when src is a mail of an
// order revision that was cancelled: a confirmation is never mailed for a
// cancelled order, whatever its own row says. A cancellation notice may be
// resent.
func refuseCancelledOrder(ctx context.Context, tx pgx.Tx, key string, src resendSource) error {
	if src.template == mailtype.TemplateCancelNotice {
		return nil
	}
	var cancelled bool
	if err := tx.QueryRow(ctx, orderCancelledSQL, src.orderID, src.template, src.revision).Scan(&cancelled); err != nil {
		return err
	}
	if !cancelled {
		return nil
	}
	return &StateError{DedupeKey: key, Status: src.status, Action: "resend",
		Hint: fmt.Sprintf("order %s (revision %d) was cancelled; a confirmation is not sent for a cancelled order", src.orderID, max(src.revision, 1))}
}

func insertResend(ctx context.Context, tx pgx.Tx, newKey, domain, namespace string, src resendSource) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new event id: %w", err)
	}
	_, err = tx.Exec(ctx, insertResendSQL, id, newKey, src.orderID, src.template, src.locale, src.toEmail,
		src.payload, src.subject, src.text, src.html, mailtype.MessageID(newKey, domain),
		src.from, src.toName, src.replyTo, resendIdempotencyKey(src.from, namespace, newKey), src.revision)
	return err
}

// resendIdempotencyKey is the stored idempotency key of a resend: "" for a
// copy of a row written before the envelope columns (its sender derives the
// key), else the new key in namespace.
func resendIdempotencyKey(from, namespace, key string) string {
	if from == "" {
		return ""
	}
	return mailtype.IdempotencyKey(namespace, key)
}

// likePrefix returns a LIKE pattern matching strings that start with p.
func likePrefix(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(p) + "%"
}

// ReconcileResult is what Reconcile did.
type ReconcileResult struct {
	// Status is the mail's new status.
	Status mailtype.Status
	// Feedback is the event written to the outbox, or "" when none.
	Feedback mailtype.EventType
}

type reconcileRow struct {
	orderID, template, provider, providerMsgID, eventID, traceContext string
	attempts, revision                                                int
	status                                                            mailtype.Status
}

// reconcileSQL settles an unknown mail in one conditional statement: $2
// true means delivered. A not-delivered mail whose order was cancelled
// meanwhile (cancel_requested while sending, or cancel_event_id recorded
// on the unknown row) goes to cancelled, never back to pending (docs/design.md,
// "State machine").
const reconcileSQL = `
UPDATE mail SET
       status = CASE WHEN $2::bool THEN 'sent'
                     WHEN cancel_requested OR cancel_event_id IS NOT NULL THEN 'cancelled'
                     ELSE 'pending' END,
       sent_at = CASE WHEN $2::bool THEN now() ELSE sent_at END,
       ambiguous = CASE WHEN $2::bool THEN ambiguous ELSE 0 END,
       budget_base = CASE WHEN $2::bool THEN budget_base ELSE sends END,
       send_after = now(), locked_until = NULL, locked_by = NULL, updated_at = now()
WHERE dedupe_key = $1 AND status = 'unknown'
RETURNING order_id, template, COALESCE(provider, ''), COALESCE(provider_message_id, ''),
          COALESCE(event_id::text, ''), sends, status, revision, COALESCE(trace_context, '')`

// Reconcile settles an `unknown` mail (docs/design.md, "State machine") by what the
// operator found out. Delivered: the mail becomes sent and an EmailSent
// event is written (a cancel that came meanwhile was already reported as
// EmailCancelTooLate by the consumer, as for a sender's success). Not
// delivered: the mail goes back to pending, due now, with a fresh attempt
// budget (issue 30): sender.max_attempts counts only the sends after this
// (budget_base = sends; sends, the total, is kept for `mail show` and the
// feedback events' attempts), and its ambiguous count starts again, since
// the operator says those sends did not deliver it: a later ambiguous
// answer or refusal is judged on the new sends alone. Its attempts, the
// fencing token, are kept. Or it goes to cancelled with an
// EmailCancelled event when its order was cancelled meanwhile. It returns
// ErrNotFound when no mail has dedupeKey and a *StateError when it is not
// unknown.
func (s *Store) Reconcile(ctx context.Context, dedupeKey string, delivered bool) (ReconcileResult, error) {
	return s.reconcile(ctx, dedupeKey, delivered, true)
}

// ReconcileDryRun says what Reconcile would do, with the same result and
// errors, and changes nothing: it runs the very same transaction and rolls
// it back.
func (s *Store) ReconcileDryRun(ctx context.Context, dedupeKey string, delivered bool) (ReconcileResult, error) {
	return s.reconcile(ctx, dedupeKey, delivered, false)
}

// errRollback ends the transaction of a dry run without committing it.
var errRollback = errors.New("dry run: roll back")

func (s *Store) reconcile(ctx context.Context, dedupeKey string, delivered, commit bool) (ReconcileResult, error) {
	var res ReconcileResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var r reconcileRow
		err := tx.QueryRow(ctx, reconcileSQL, dedupeKey, delivered).Scan(&r.orderID, &r.template,
			&r.provider, &r.providerMsgID, &r.eventID, &r.attempts, &r.status, &r.revision, &r.traceContext)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.reconcileRefusal(ctx, tx, dedupeKey)
		}
		if err != nil {
			return err
		}
		res = ReconcileResult{Status: r.status, Feedback: reconcileFeedback(r.status)}
		if res.Feedback != "" {
			err = s.insertFeedback(ctx, tx, Feedback{
				Type: res.Feedback, DedupeKey: dedupeKey, OrderID: r.orderID, Revision: r.revision, Template: r.template,
				Status: r.status, Attempts: r.attempts, Provider: r.provider,
				ProviderMessageID: r.providerMsgID, SourceEventID: r.eventID, TraceContext: r.traceContext,
			})
		}
		if err == nil && !commit {
			return errRollback
		}
		return err
	})
	if errors.Is(err, errRollback) {
		return res, nil
	}
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", dedupeKey, interpretError(err))
	}
	return res, nil
}

// reconcileFeedback is the event a reconciled mail reports, "" for none
// (back to pending: its next terminal transition reports).
func reconcileFeedback(st mailtype.Status) mailtype.EventType {
	switch st {
	case mailtype.StatusSent:
		return mailtype.EmailSent
	case mailtype.StatusCancelled:
		return mailtype.EmailCancelled
	}
	return ""
}

// reconcileRefusal explains why no unknown row matched dedupeKey.
func (s *Store) reconcileRefusal(ctx context.Context, tx pgx.Tx, dedupeKey string) error {
	var st mailtype.Status
	if err := tx.QueryRow(ctx, `SELECT status FROM mail WHERE dedupe_key = $1`, dedupeKey).Scan(&st); err != nil {
		return err
	}
	return &StateError{DedupeKey: dedupeKey, Status: st, Action: "reconcile",
		Hint: "only unknown mails are reconciled (an ambiguous send under the unknown policy)"}
}
