package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TimelineKind names what a TimelineEntry records.
type TimelineKind string

// The kinds of a mail's timeline, in the order a mail meets them.
const (
	TimelineReceived TimelineKind = "received" // the input event was stored
	TimelineAttempt  TimelineKind = "attempt"  // a claim and send, with the provider's reply
	TimelineOutcome  TimelineKind = "outcome"  // the status the mail reached
	TimelineFeedback TimelineKind = "feedback" // a feedback event written, and its publication
	TimelineReport   TimelineKind = "report"   // a provider report (webhook or DSN)
	TimelineOperator TimelineKind = "operator" // an operator action (audit log)
)

// TimelineEntry is one moment of a mail's story.
type TimelineEntry struct {
	At      time.Time         `json:"at"`
	Kind    TimelineKind      `json:"kind"`
	Summary string            `json:"summary"`
	Detail  map[string]string `json:"detail,omitempty"`
}

// MailTimeline returns the story of the mail with this dedupe key, oldest
// first (entries of the same instant in the order received, attempt,
// outcome, report, feedback, operator): the
// input event; its sends (from the mail row, and from mail_attempt for
// every send that did not end in a first-send success: docs/design.md,
// "Support search and timeline"); each outcome; each feedback event with
// its publication; each provider report (webhook or DSN) and
// reconciliation by evidence; each operator action of the audit log.
// Times are the database's, or the provider's for its reports. It returns
// ErrNotFound when no mail has the key, and a transient *mailtype.Error
// (ReasonDatabase) when the database is unreachable.
func (s *Store) MailTimeline(ctx context.Context, dedupeKey string) ([]TimelineEntry, error) {
	var out []TimelineEntry
	// One snapshot, so that the row, its events and its attempts agree.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		out, err = timeline(ctx, tx, dedupeKey)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the timeline of mail %q: %w", dedupeKey, interpretError(err))
	}
	// After the snapshot: a schema without the audit log fails the query,
	// which would abort the transaction.
	audit, err := auditEntries(ctx, s.pool, dedupeKey)
	if err != nil {
		return nil, fmt.Errorf("read the timeline of mail %q: %w", dedupeKey, interpretError(err))
	}
	out = append(out, audit...)
	slices.SortStableFunc(out, func(a, b TimelineEntry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return kindRank(a.Kind) - kindRank(b.Kind)
	})
	return out, nil
}

// timeline reads the entries of the mail with key on tx, unsorted.
func timeline(ctx context.Context, tx dbtx, key string) ([]TimelineEntry, error) {
	row, err := timelineRow(ctx, tx, key)
	if err != nil {
		return nil, err
	}
	out := row.entries()
	events, err := timelineEvents(ctx, tx, key)
	if err != nil {
		return nil, err
	}
	out = append(out, reportsOf(row, events)...)
	for _, e := range events {
		out = append(out, e.entries()...)
	}
	attempts, err := attemptEntries(ctx, tx, row.id)
	if err != nil {
		return nil, err
	}
	return append(out, attempts...), nil
}

func kindRank(k TimelineKind) int {
	return slices.Index([]TimelineKind{TimelineReceived, TimelineAttempt, TimelineOutcome,
		TimelineReport, TimelineFeedback, TimelineOperator}, k)
}

// timelineMail is what the timeline reads of the mail row.
type timelineMail struct {
	id                                         int64
	key                                        string
	eventID, orderID, template, status, trace  string
	provider, pmid, lastError, lastErrorClass  string
	revision, claims, sends                    int
	createdAt, updatedAt                       time.Time
	occurredAt, firstClaimed, started, sentAt  *time.Time
	delivered, delayed, complained, reconciled *time.Time
	evidenceType, evidenceID, cancelEventID    string
}

const timelineMailSQL = `
SELECT id, COALESCE(event_id::text, ''), order_id, template, status, COALESCE(trace_context, ''),
    COALESCE(provider, ''), COALESCE(provider_message_id, ''), COALESCE(last_error, ''), COALESCE(last_error_class, ''),
    revision, attempts, sends, created_at, occurred_at, first_claimed_at,
    send_started_at, sent_at, delivered_at, delivery_delayed_at, complained_at, reconciled_at,
    COALESCE(evidence_type, ''), COALESCE(evidence_id, ''), updated_at, COALESCE(cancel_event_id::text, '')
FROM mail WHERE dedupe_key = $1`

func timelineRow(ctx context.Context, tx dbtx, key string) (timelineMail, error) {
	m := timelineMail{key: key}
	err := tx.QueryRow(ctx, timelineMailSQL, key).Scan(&m.id, &m.eventID, &m.orderID, &m.template, &m.status, &m.trace,
		&m.provider, &m.pmid, &m.lastError, &m.lastErrorClass, &m.revision, &m.claims, &m.sends,
		&m.createdAt, &m.occurredAt, &m.firstClaimed, &m.started, &m.sentAt, &m.delivered,
		&m.delayed, &m.complained, &m.reconciled, &m.evidenceType, &m.evidenceID, &m.updatedAt, &m.cancelEventID)
	return m, err
}

// entries are the row's own entries: its receipt, its last send, and
// its status when no feedback event reports it (a mail with work left).
func (m timelineMail) entries() []TimelineEntry {
	out := []TimelineEntry{m.received()}
	if m.firstClaimed != nil {
		out = append(out, TimelineEntry{At: *m.firstClaimed, Kind: TimelineAttempt, Summary: "first claimed for sending",
			Detail: map[string]string{"claims": fmt.Sprint(m.claims), "sends": fmt.Sprint(m.sends)}})
	}
	if e, ok := m.lastSend(); ok {
		out = append(out, e)
	}
	switch mailtype.Status(m.status) {
	case mailtype.StatusPending, mailtype.StatusSending, mailtype.StatusHeld:
		out = append(out, TimelineEntry{At: m.updatedAt, Kind: TimelineOutcome, Summary: m.status + " (work left)",
			Detail: nonEmpty("last_error", m.lastError, "last_error_class", m.lastErrorClass)})
	}
	return out
}

func (m timelineMail) received() TimelineEntry {
	d := nonEmpty("event_id", m.eventID, "order_id", m.orderID, "template", m.template,
		"revision", fmt.Sprint(m.revision), "trace_id", traceID(m.trace), "cancel_event_id", m.cancelEventID)
	if m.occurredAt != nil {
		d["occurred_at"] = m.occurredAt.UTC().Format(time.RFC3339Nano)
	}
	if m.eventID == "" {
		return TimelineEntry{At: m.createdAt, Kind: TimelineReceived, Detail: d,
			Summary: "tombstone written: the order was cancelled before its confirmation arrived"}
	}
	if original, _, ok := strings.Cut(m.key, ResendSuffix); ok {
		return TimelineEntry{At: m.createdAt, Kind: TimelineReceived, Detail: d,
			Summary: "resend of " + original + " written by an operator"}
	}
	return TimelineEntry{At: m.createdAt, Kind: TimelineReceived, Summary: "input event received", Detail: d}
}

// lastSend is the send the row still describes: the provider that
// accepted the mail on its first send and its id (the happy path's only
// send, which mail_attempt does not keep), or the send in flight.
func (m timelineMail) lastSend() (TimelineEntry, bool) {
	d := nonEmpty("provider", m.provider, "provider_message_id", m.pmid, "send", fmt.Sprint(m.sends))
	switch {
	case m.sentAt != nil && m.pmid != "" && m.sends <= 1:
		at := *m.sentAt
		if m.started != nil {
			at = *m.started
		}
		d["accepted_at"] = m.sentAt.UTC().Format(time.RFC3339Nano)
		return TimelineEntry{At: at, Kind: TimelineAttempt, Detail: d,
			Summary: fmt.Sprintf("send %d: %s accepted the mail as %s", m.sends, m.provider, m.pmid)}, true
	case m.status == string(mailtype.StatusSending) && m.started != nil:
		return TimelineEntry{At: *m.started, Kind: TimelineAttempt, Detail: d,
			Summary: fmt.Sprintf("send %d: handed to %s, no answer yet", m.sends, m.provider)}, true
	}
	return TimelineEntry{}, false
}

// traceID is the trace id of a stored trace context (tracing.Encode's
// {"traceparent": "00-<trace id>-<span id>-<flags>"}), "" for none.
func traceID(stored string) string {
	var tc struct {
		Traceparent string `json:"traceparent"`
	}
	if stored == "" || json.Unmarshal([]byte(stored), &tc) != nil {
		return ""
	}
	if parts := strings.Split(tc.Traceparent, "-"); len(parts) == 4 {
		return parts[1]
	}
	return ""
}

// nonEmpty returns the map of the key-value pairs kv whose value is set.
func nonEmpty(kv ...string) map[string]string {
	d := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			d[kv[i]] = kv[i+1]
		}
	}
	return d
}

// MailContent is the rendered mail as stored and sent: every attempt
// sends these bytes.
type MailContent struct {
	DedupeKey string `json:"dedupe_key"`
	From      string `json:"from"`
	To        string `json:"to"`
	ToName    string `json:"to_name,omitempty"`
	ReplyTo   string `json:"reply_to,omitempty"`
	Subject   string `json:"subject"`
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	HTML      string `json:"html"`
}

// MailContentByKey returns the rendered mail with this dedupe key, as it
// was stored at ingest (From is "" for a row written before migration
// 00050, whose sender used its configured From; every field but
// DedupeKey is "" for a tombstone). ErrNotFound when no mail has the key;
// a transient *mailtype.Error (ReasonDatabase) when the database is
// unreachable.
func (s *Store) MailContentByKey(ctx context.Context, dedupeKey string) (MailContent, error) {
	c := MailContent{DedupeKey: dedupeKey}
	err := s.pool.QueryRow(ctx, `SELECT from_addr, to_email, to_name, reply_to, subject, message_id, body_text, body_html
		FROM mail WHERE dedupe_key = $1`, dedupeKey).
		Scan(&c.From, &c.To, &c.ToName, &c.ReplyTo, &c.Subject, &c.MessageID, &c.Text, &c.HTML)
	if err != nil {
		return MailContent{}, fmt.Errorf("read the content of mail %q: %w", dedupeKey, interpretError(err))
	}
	return c, nil
}

// scanRows collects rows with scan, naming what was read in the error
// (the driver's error, for the caller to interpret).
func scanRows[T any](rows pgx.Rows, err error, what string, scan pgx.RowToFunc[T]) ([]T, error) {
	if err == nil {
		var out []T
		if out, err = pgx.CollectRows(rows, scan); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("read %s: %w", what, err)
}
