package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrBadQuery wraps every refusal of an invalid MailQuery; the message
// names the field.
var ErrBadQuery = errors.New("invalid search")

// MailQuery selects the mails of SearchMails. Every set field must match
// (AND); the zero query matches every mail. Keys and addresses are taken
// as given: the caller normalises them first (operator input rules).
type MailQuery struct {
	OrderID string
	// Recipient is an address; the whole address matches
	// case-insensitively (lower(to_email), mail_recipient_idx). RFC 5321
	// lets a local part be case-sensitive, but no mailbox provider in use
	// treats it so, support staff type addresses in any case, and a search
	// changes nothing, so the useful answer is every mail to the address
	// in any case.
	Recipient string
	DedupeKey string
	// EventID is a UUID: the input event of the mail, or a feedback event
	// of it (outbox.event_id).
	EventID           string
	ProviderMessageID string
	Template          string
	Provider          string
	// Statuses keeps the mails in any of these; empty keeps all.
	Statuses []mailtype.Status
	// Since and Until bound created_at (when the event was received):
	// Since <= created_at < Until; zero leaves that side open.
	Since, Until time.Time
	// Oldest sorts the oldest first; the default is the newest first.
	// Mails received at the same instant are ordered by their row id.
	Oldest bool
	// Limit is the page size (1..MaxPageSize); Offset the mails skipped
	// (0..MaxOffset).
	Limit, Offset int
}

// MaxPageSize is the largest MailQuery.Limit.
const MaxPageSize = 200

// MaxOffset is the largest MailQuery.Offset: a page further on costs a
// scan of every mail before it, and a person paging that far should
// narrow the search instead.
const MaxOffset = 10000

// MailPage is one page of SearchMails.
type MailPage struct {
	Mails []MailSummary `json:"mails"`
	// Total counts the mails that match, up to CountCap; TotalCapped is
	// true when more match than were counted.
	Total       int64 `json:"total"`
	TotalCapped bool  `json:"total_capped"`
	Limit       int   `json:"limit"`
	Offset      int   `json:"offset"`
}

// CountCap is the most matching mails SearchMails counts.
const CountCap = 10000

// SearchMails returns the page of q's mails, newest first (or oldest
// first with q.Oldest), with the count of the matches up to CountCap. A
// page past the last match is empty, with the count. Every filter reads an
// index (docs/design.md, "Support search and timeline"); a filter on
// template or provider alone reads the mails in time order until the page
// is full. An invalid query is an error wrapping ErrBadQuery that names
// the field; an unreachable database a transient *mailtype.Error
// (ReasonDatabase). Safe for concurrent use.
func (s *Store) SearchMails(ctx context.Context, q MailQuery) (MailPage, error) {
	if err := q.check(); err != nil {
		return MailPage{}, fmt.Errorf("search mails: %w", err)
	}
	where, args := q.where()
	dir := "DESC"
	if q.Oldest {
		dir = "ASC"
	}
	page := MailPage{Limit: q.Limit, Offset: q.Offset}
	rows, err := s.pool.Query(ctx, "SELECT "+summaryColumns+" FROM mail m WHERE "+where+
		" ORDER BY created_at "+dir+", id "+dir+" LIMIT "+strconv.Itoa(q.Limit)+" OFFSET "+strconv.Itoa(q.Offset), args...)
	if err != nil {
		return MailPage{}, fmt.Errorf("search mails: %w", interpretError(err))
	}
	if page.Mails, err = pgx.CollectRows(rows, scanSummary); err != nil {
		return MailPage{}, fmt.Errorf("search mails: %w", interpretError(err))
	}
	if page.Mails == nil {
		page.Mails = []MailSummary{} // "mails": [] in JSON
	}
	if n := len(page.Mails); n > 0 && n < q.Limit {
		page.Total = int64(q.Offset + n) // the last page: no count needed
		return page, nil
	}
	count := "SELECT count(*) FROM (SELECT 1 FROM mail m WHERE " + where + " LIMIT " + strconv.Itoa(CountCap+1) + ") c"
	if err := s.pool.QueryRow(ctx, count, args...).Scan(&page.Total); err != nil {
		return MailPage{}, fmt.Errorf("count mails: %w", interpretError(err))
	}
	if page.Total > CountCap {
		page.Total, page.TotalCapped = CountCap, true
	}
	return page, nil
}

// check returns the error of an invalid query, naming the field.
func (q MailQuery) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadQuery}, a...)...)
	}
	if err := checkQueryTexts("order_id", q.OrderID, "recipient", q.Recipient, "dedupe_key", q.DedupeKey, "event_id", q.EventID,
		"provider_message_id", q.ProviderMessageID, "template", q.Template, "provider", q.Provider); err != nil {
		return err
	}
	for _, st := range q.Statuses {
		if !slices.Contains(mailtype.Statuses, st) {
			return bad("status must be one of %v, got %q", mailtype.Statuses, st)
		}
	}
	switch {
	case q.Limit < 1 || q.Limit > MaxPageSize:
		return bad("limit must be 1 to %d, got %d", MaxPageSize, q.Limit)
	case q.Offset < 0:
		return bad("offset must not be negative, got %d", q.Offset)
	case q.Offset > MaxOffset:
		return bad("offset %d is past the %d mails a search pages through: narrow the search (a time range, a status, a template)", q.Offset, MaxOffset)
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until):
		return bad("since (%s) must be before until (%s)", q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	if q.EventID != "" {
		if _, err := uuid.Parse(q.EventID); err != nil {
			return bad("event id must be a UUID, got %q", q.EventID)
		}
	}
	return nil
}

// where returns the query's WHERE clause on mail m and its arguments. The
// clause is built from constant fragments; only the statuses are literals,
// from the closed set check allows, so that the planner can prove the
// partial indexes of those statuses whatever the query mode.
func (q MailQuery) where() (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	for _, f := range []struct{ cond, v string }{
		{"order_id = $?", q.OrderID},
		{"lower(to_email) = lower($?)", q.Recipient},
		{"dedupe_key = $?", q.DedupeKey},
		{"provider_message_id = $?", q.ProviderMessageID},
		{"template = $?", q.Template},
		{"provider = $?", q.Provider},
	} {
		if f.v != "" {
			add(f.cond, f.v)
		}
	}
	if q.EventID != "" {
		add(`m.id IN (SELECT id FROM mail WHERE event_id = $?::uuid
			UNION ALL SELECT e.id FROM outbox o JOIN mail e ON e.dedupe_key = o.dedupe_key WHERE o.event_id = $?::uuid)`, q.EventID)
	}
	if !q.Since.IsZero() {
		add("created_at >= $?", q.Since)
	}
	if !q.Until.IsZero() {
		add("created_at < $?", q.Until)
	}
	if len(q.Statuses) > 0 {
		lit := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			lit[i] = "'" + string(st) + "'"
		}
		conds = append(conds, "status IN ("+strings.Join(lit, ", ")+")")
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

// summaryColumns are the columns of a search result, in scanSummary's order.
const summaryColumns = `dedupe_key, order_id, template, status, sends, attempts, COALESCE(provider, ''),
       COALESCE(provider_message_id, ''), COALESCE(last_error, ''), COALESCE(last_error_class, ''),
       created_at, updated_at, to_email, subject, locale, revision, sent_at`

func scanSummary(r pgx.CollectableRow) (MailSummary, error) {
	var m MailSummary
	err := r.Scan(&m.DedupeKey, &m.OrderID, &m.Template, &m.Status, &m.Sends, &m.Attempts, &m.Provider,
		&m.ProviderMessageID, &m.LastError, &m.LastErrorClass, &m.CreatedAt, &m.UpdatedAt,
		&m.ToEmail, &m.Subject, &m.Locale, &m.Revision, &m.SentAt)
	return m, err
}
