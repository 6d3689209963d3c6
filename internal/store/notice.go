package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// NoticeSource is the confirmation a cancellation notice is written for:
// a mail of a cancelled order that was, or may have been, delivered. The
// notice goes to the same address, in the same locale, with the order as
// it was confirmed (Payload, the event's data object).
type NoticeSource struct {
	// DedupeKey is the key of the confirmation (or of its resend) that
	// was too late to cancel.
	DedupeKey string
	OrderID   string
	Revision  int
	Locale    string
	ToEmail   string
	ToName    string
	// From and ReplyTo are the envelope the confirmation was sent with
	// (From "" for a row written before the envelope columns).
	From, ReplyTo string
	Payload       []byte
	// ConfirmedAt is when the confirmation's event occurred.
	ConfirmedAt time.Time
	// CancelEventID is the OrderCancelled event that came too late ("" when
	// unknown); the notice row takes it as its event id, so the notice's
	// own feedback events name the cancel as their source.
	CancelEventID string
}

// NoticeRenderer renders the cancellation notice of a confirmation.
// RenderNotice returns the new mail, keyed
// mailtype.CancelNoticeKey(OrderID, Revision), pending; an error means the
// notice cannot be rendered for this order (a template error), and the
// notice is recorded failed with reason render and an EmailFailed event
// instead, so that nothing is lost silently. It must not block: it runs
// inside the transaction that records the outcome.
type NoticeRenderer interface {
	RenderNotice(src NoticeSource) (NewMail, error)
}

const noticeSourceSQL = `
SELECT order_id, revision, locale, to_email, to_name, from_addr, reply_to, payload::text,
    COALESCE(occurred_at, created_at), COALESCE(cancel_event_id::text, '')
FROM mail WHERE dedupe_key = $1`

// insertFailedNoticeSQL records a notice that could not be rendered.
const insertFailedNoticeSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, status, last_error, last_error_class,
    revision, occurred_at)
VALUES ($1, $2, $3, $4, $5, 'failed', $6, 'permanent', $7, now())
ON CONFLICT DO NOTHING`

// insertNotice writes, inside tx, the cancellation notice of the order of
// the mail keyed confirmation: nothing when notices are off
// (Options.Notices nil, mail.cancel_notice false), when the order's
// revision has its notice already (one notice per revision, whichever of
// its mails was too late), or when the confirmation has no address (a
// tombstone). It reports whether a pending notice was written. The notice
// row, or the EmailFailed of one that could not be rendered, carries
// traceContext (the writer's span; "" for none).
func (s *Store) insertNotice(ctx context.Context, tx dbtx, confirmation, traceContext string) (bool, error) {
	if s.notices == nil {
		return false, nil
	}
	src := NoticeSource{DedupeKey: confirmation}
	var payload string
	err := tx.QueryRow(ctx, noticeSourceSQL, confirmation).Scan(&src.OrderID, &src.Revision, &src.Locale,
		&src.ToEmail, &src.ToName, &src.From, &src.ReplyTo, &payload, &src.ConfirmedAt, &src.CancelEventID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && src.ToEmail == "") {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the confirmation %s for its notice: %w", confirmation, err)
	}
	src.Payload = []byte(payload)
	m, rerr := s.notices.RenderNotice(src)
	if rerr != nil {
		return false, s.insertFailedNotice(ctx, tx, src, rerr, traceContext)
	}
	m.TraceContext = traceContext
	res := make([]IngestResult, 1)
	// Outside the per-recipient limit: the notice corrects a mail that was
	// already handed over, and holding it would leave the customer with the
	// confirmation of a cancelled order.
	if _, err := insertMails(ctx, tx, RecipientLimit{}, IngestLease{}, []IngestItem{{Mail: &m}}, res); err != nil {
		return false, fmt.Errorf("insert the notice of %s: %w", confirmation, err)
	}
	return res[0].Disposition == mailtype.DispositionInserted, nil
}

// insertFailedNotice records a notice that could not be rendered as
// failed (reason render) with its EmailFailed event.
func (s *Store) insertFailedNotice(ctx context.Context, tx dbtx, src NoticeSource, rerr error, traceContext string) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new event id: %w", err)
	}
	key := mailtype.CancelNoticeKey(src.OrderID, src.Revision)
	msg := mailtype.Sanitize(rerr.Error())
	tag, err := tx.Exec(ctx, insertFailedNoticeSQL, id, key, src.OrderID, mailtype.TemplateCancelNotice, src.Locale,
		string(mailtype.ReasonRender)+": "+msg, revisionOr1(src.Revision))
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	return s.insertFeedback(ctx, tx, Feedback{
		Type: mailtype.EmailFailed, DedupeKey: key, OrderID: src.OrderID, Revision: src.Revision,
		Template: mailtype.TemplateCancelNotice, Status: mailtype.StatusFailed, SourceEventID: id.String(),
		ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonRender, Error: msg, TraceContext: traceContext,
	})
}
