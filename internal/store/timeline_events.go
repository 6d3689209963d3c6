package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/api/feedback"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// timelineEvent is one outbox row of a mail, with its payload's data.
type timelineEvent struct {
	eventID, eventType, routingKey, lastError string
	attempts                                  int
	createdAt                                 time.Time
	publishedAt, deadAt                       *time.Time
	data                                      feedback.Data
}

const timelineEventsSQL = `
SELECT event_id::text, event_type, routing_key, COALESCE(last_error, ''), attempts, created_at, published_at, dead_at,
    COALESCE(payload->'data', '{}')
FROM outbox WHERE dedupe_key = $1 ORDER BY id`

func timelineEvents(ctx context.Context, tx dbtx, key string) ([]timelineEvent, error) {
	rows, err := tx.Query(ctx, timelineEventsSQL, key)
	return scanRows(rows, err, fmt.Sprintf("the feedback events of mail %q", key), func(r pgx.CollectableRow) (timelineEvent, error) {
		var e timelineEvent
		err := r.Scan(&e.eventID, &e.eventType, &e.routingKey, &e.lastError, &e.attempts, &e.createdAt,
			&e.publishedAt, &e.deadAt, &e.data)
		return e, err
	})
}

// entries are the event's outcome, if it reports one, and its
// publication.
func (e timelineEvent) entries() []TimelineEntry {
	var out []TimelineEntry
	if o, ok := e.outcome(); ok {
		out = append(out, o)
	}
	d := nonEmpty("event_id", e.eventID, "routing_key", e.routingKey, "written_at", e.createdAt.UTC().Format(time.RFC3339Nano),
		"last_error", e.lastError)
	d["publish_attempts"] = fmt.Sprint(e.attempts)
	switch {
	case e.publishedAt != nil:
		return append(out, TimelineEntry{At: *e.publishedAt, Kind: TimelineFeedback, Detail: d,
			Summary: e.eventType + " published as " + e.routingKey})
	case e.deadAt != nil:
		return append(out, TimelineEntry{At: *e.deadAt, Kind: TimelineFeedback, Detail: d,
			Summary: fmt.Sprintf("%s dead: the relay gave up after %d publish attempts", e.eventType, e.attempts)})
	}
	return append(out, TimelineEntry{At: e.createdAt, Kind: TimelineFeedback, Detail: d,
		Summary: e.eventType + " written, not published yet"})
}

// outcome is the status change the event reports: the sender's (or the
// janitor's, or a cancellation's) verdict, or the failure a provider's
// report made of a sent mail.
func (e timelineEvent) outcome() (TimelineEntry, bool) {
	d := nonEmpty("provider", e.data.Provider, "provider_message_id", e.data.ProviderMessageID, "error_class", e.data.ErrorClass,
		"error_reason", e.data.ErrorReason, "error", e.data.Error, "reconciled_by", e.data.ReconciledBy,
		"failover_from", e.data.FailoverFrom)
	if pd := e.data.ProviderDetail; pd != nil {
		for k, v := range map[string]string{"smtp_code": itoaNonZero(pd.SMTPCode), "smtp_enhanced_code": pd.SMTPEnhancedCode,
			"http_status": itoaNonZero(pd.HTTPStatus), "error_name": pd.ErrorName} {
			if v != "" {
				d[k] = v
			}
		}
	}
	d["sends"] = fmt.Sprint(e.data.Attempts)
	entry := TimelineEntry{At: e.createdAt, Kind: TimelineOutcome, Detail: d}
	switch mailtype.EventType(e.eventType) {
	case mailtype.EmailSent:
		entry.Summary = "sent: " + e.data.Provider + " accepted the mail"
		if e.data.ProviderMessageID != "" {
			entry.Summary += " as " + e.data.ProviderMessageID
		}
		if e.data.ReconciledBy != "" {
			entry.Summary = "sent, as " + e.data.Provider + "'s report shows"
		}
	case mailtype.EmailFailed:
		entry.Summary = "failed: " + e.data.Error
	case mailtype.EmailUnknown:
		entry.Summary = "unknown: the send may have reached the provider: " + e.data.Error
	case mailtype.EmailCancelled:
		entry.Summary = "cancelled"
	case mailtype.EmailBounced:
		if e.data.Status != string(mailtype.StatusFailed) {
			return TimelineEntry{}, false
		}
		entry.Summary = "failed: the provider reported a bounce"
	default:
		return TimelineEntry{}, false
	}
	return entry, true
}

func itoaNonZero(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// reportsOf are the provider's reports about the mail: those its feedback
// events carry (data.provider_event, at the provider's time), and those
// only the row keeps (a delivery delay; a delivery or complaint reported
// but not published); and the settling of an unknown mail by one of them.
func reportsOf(m timelineMail, events []timelineEvent) []TimelineEntry {
	var out []TimelineEntry
	published := map[mailtype.EventType]bool{}
	seen := map[string]int{} // the entry of each report, by webhook id
	for _, e := range events {
		pe := e.data.ProviderEvent
		if pe == nil {
			continue
		}
		published[mailtype.EventType(e.eventType)] = true
		if i, ok := seen[pe.WebhookID]; ok { // an unknown mail's EmailSent and the report's own event
			out[i].Detail["events"] += ", " + e.eventType
			continue
		}
		seen[pe.WebhookID] = len(out)
		out = append(out, TimelineEntry{At: pe.At, Kind: TimelineReport, Summary: e.data.Provider + " reported " + pe.Type,
			Detail: nonEmpty("type", pe.Type, "webhook_id", pe.WebhookID, "bounce_type", pe.BounceType,
				"bounce_subtype", pe.BounceSubtype, "reason", pe.Reason, "events", e.eventType)})
	}
	for _, r := range []struct {
		at   *time.Time
		ev   mailtype.EventType
		what string
	}{
		{m.delivered, mailtype.EmailDelivered, "delivered"},
		{m.complained, mailtype.EmailComplained, "complained"},
		{m.delayed, "", "delivery delayed (still trying)"},
	} {
		if r.at != nil && (r.ev == "" || !published[r.ev]) {
			out = append(out, TimelineEntry{At: *r.at, Kind: TimelineReport, Summary: m.provider + " reported " + r.what})
		}
	}
	if m.reconciled != nil {
		out = append(out, TimelineEntry{At: *m.reconciled, Kind: TimelineReport,
			Summary: "the unknown send was settled by the provider's report " + m.evidenceType,
			Detail:  nonEmpty("by", ReconciledByEvidence, "evidence_type", m.evidenceType, "evidence_id", m.evidenceID)})
	}
	return out
}
