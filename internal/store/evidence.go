package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ReconciledByEvidence is the mail's reconciled_by, and the events'
// data.reconciled_by, of an `unknown` mail that a provider's report
// settled (reconciliation by provider evidence, docs/design.md,
// "Reconciliation by provider evidence").
const ReconciledByEvidence = "provider_evidence"

// mailOfTagSQL locks the mail a Resend report names by its
// mailtype.ReportTagName tag (a mail whose email id mailsvc never got): by
// its id, only while it has no provider message id, with what the caller
// checks the tag against (the stored idempotency key) and how many of its
// sends were ambiguous.
const mailOfTagSQL = `
SELECT id, dedupe_key, order_id, template, COALESCE(event_id::text, ''), sends, revision, status,
    delivered_at IS NOT NULL, COALESCE(trace_context, ''), to_email, COALESCE(provider, ''), COALESCE(provider_message_id, ''),
    complained_at IS NOT NULL, COALESCE(idempotency_key, ''), ambiguous
FROM mail WHERE id = $1 AND COALESCE(provider_message_id, '') = '' FOR UPDATE`

// mailsOfTag returns the mail w's tag names (w.MailTag), or none. The tag
// must be the mail's own (mailtype.ReportTag of its id and stored
// idempotency key), so a mail of another deployment or schema never
// matches. An `unknown` mail matches only when w's provider sent it. A
// mail whose outcome is not written yet (sending, or pending again after
// an ambiguous send) is returned with early set: the report is asked
// again later (ErrReportTooEarly), whatever provider it names, since it
// changes nothing now.
func mailsOfTag(ctx context.Context, tx pgx.Tx, w Webhook) ([]webhookMail, error) {
	id, ok := mailtype.ReportTagID(w.MailTag)
	if !ok {
		return nil, nil
	}
	var m webhookMail
	var key string
	var ambiguous int
	err := tx.QueryRow(ctx, mailOfTagSQL, id).Scan(&m.id, &m.fb.DedupeKey, &m.fb.OrderID, &m.fb.Template, &m.fb.SourceEventID,
		&m.fb.Attempts, &m.fb.Revision, &m.fb.Status, &m.delivered, &m.fb.TraceContext, &m.to, &m.fb.Provider,
		&m.fb.ProviderMessageID, &m.complained, &key, &ambiguous)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if key == "" || mailtype.ReportTag(id, key) != w.MailTag {
		return nil, nil
	}
	switch {
	case m.fb.Status == mailtype.StatusSending || (m.fb.Status == mailtype.StatusPending && ambiguous > 0):
		m.early = true
	case m.fb.Status != mailtype.StatusUnknown || m.fb.Provider != w.Provider:
		return nil, nil
	}
	return []webhookMail{m}, nil
}

// isEvidence reports whether w proves what became of an `unknown` mail:
// a delivery, a complaint (the mail was delivered), a bounce, or the
// provider's report that it did not send the mail. A delay proves
// nothing yet; nor does a message to a VERP address that is no readable
// report (an SMTP "undetermined" bounce: it may be an auto-reply, which
// RFC 3834 sends to the envelope sender).
func (w Webhook) isEvidence() bool {
	switch w.Effect {
	case EffectDelivered, EffectComplained, EffectFailed, EffectSuppressed:
		return true
	case EffectBounced:
		return w.MailID == 0 || w.BounceType != BounceUndetermined
	}
	return false
}

// settleUnknownSQL makes an unknown mail sent, with the report that proves
// the provider took it. $2 is the provider's message id the report gives
// (Resend's email id), kept so that its later reports match by it.
const settleUnknownSQL = `
UPDATE mail SET status = 'sent', sent_at = now(), locked_until = NULL, locked_by = NULL, updated_at = now(),
    provider_message_id = COALESCE(NULLIF($2, ''), provider_message_id),
    reconciled_at = now(), reconciled_by = '` + ReconciledByEvidence + `', evidence_type = $3, evidence_id = $4, evidence_at = $5
WHERE id = $1 AND status = 'unknown'
RETURNING COALESCE(provider_message_id, '')`

// settleUnknown settles m, an `unknown` mail, by w: a report about it
// proves that the provider took the mail, so it becomes sent, and its
// EmailSent (marked reconciled_by provider_evidence, with the report as
// provider_event) is returned, to be followed by the report's own event as
// for any sent mail. m is updated to its new status. ok is false when w
// is no evidence (isEvidence) or m is not unknown: nothing changed.
func settleUnknown(ctx context.Context, tx pgx.Tx, w Webhook, pe *ProviderEvent, m *webhookMail) (Feedback, bool, error) {
	if m.fb.Status != mailtype.StatusUnknown || !w.isEvidence() {
		return Feedback{}, false, nil
	}
	var pmid string
	err := tx.QueryRow(ctx, settleUnknownSQL, m.id, w.EmailID, w.Type, w.ID, w.At).Scan(&pmid)
	if err != nil {
		return Feedback{}, false, err
	}
	m.fb.Status, m.fb.ProviderMessageID, m.fb.ReconciledBy = mailtype.StatusSent, pmid, ReconciledByEvidence
	f := m.fb
	f.Type, f.ProviderEvent = mailtype.EmailSent, pe
	return f, true, nil
}
