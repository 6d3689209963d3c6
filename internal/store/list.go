package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ListableStatuses are the statuses ListMails takes: the ones with work
// left, which a partial index holds (mail_active_idx), held
// (mail_held_idx) and failed (mail_failed_idx). Sent and cancelled rows are the bulk of the table and
// are not listed.
var ListableStatuses = []mailtype.Status{mailtype.StatusUnknown, mailtype.StatusFailed,
	mailtype.StatusPending, mailtype.StatusSending, mailtype.StatusHeld}

// MailFilter selects the mails of ListMails.
type MailFilter struct {
	// Status is one of ListableStatuses, required unless Unconfirmed.
	Status mailtype.Status
	// Unconfirmed, with Status "", selects the sent mails flagged
	// "delivery unconfirmed" by the store's DeliveryConfirm rule instead,
	// the oldest send first.
	Unconfirmed bool
	// OlderThan keeps the mails whose row last changed at least this long
	// ago (for unknown and failed mails: since they got that status; for
	// Unconfirmed: since they were sent); 0 keeps all.
	OlderThan time.Duration
	// Template keeps the mails of this template; "" keeps all.
	Template string
	// Limit is the most mails returned; it must be positive.
	Limit int
}

// MailSummary is one mail as `mailsvc mail list` shows it.
type MailSummary struct {
	DedupeKey string          `json:"dedupe_key"`
	OrderID   string          `json:"order_id"`
	Template  string          `json:"template"`
	Status    mailtype.Status `json:"status"`
	// Sends counts the sends that started (the feedback events' attempts),
	// Attempts the claims.
	Sends             int            `json:"sends"`
	Attempts          int            `json:"attempts"`
	Provider          string         `json:"provider,omitempty"`
	ProviderMessageID string         `json:"provider_message_id,omitempty"`
	LastError         string         `json:"last_error,omitempty"`
	LastErrorClass    mailtype.Class `json:"last_error_class,omitempty"`
	CreatedAt         time.Time      `json:"created_at"`
	UpdatedAt         time.Time      `json:"updated_at"`
	// ToEmail, Subject, Locale, Revision (the order revision) and SentAt
	// (when the provider accepted the mail) are filled by SearchMails
	// only; ListMails leaves them zero.
	ToEmail  string     `json:"to_email,omitempty"`
	Subject  string     `json:"subject,omitempty"`
	Locale   string     `json:"locale,omitempty"`
	Revision int        `json:"revision,omitempty"`
	SentAt   *time.Time `json:"sent_at,omitempty"`
}

// listMailsSQL reads one status's mails, oldest change first. The status
// is a literal (%s, from the closed set ListableStatuses) so that the
// planner proves the partial index's predicate whatever the query mode;
// $1 is the age, $2 the template or "", $3 the limit.
const listMailsSQL = `
SELECT dedupe_key, order_id, template, status, sends, attempts, COALESCE(provider, ''),
       COALESCE(provider_message_id, ''), COALESCE(last_error, ''), COALESCE(last_error_class, ''),
       created_at, updated_at
FROM mail
WHERE status = '%s' AND updated_at <= now() - $1::interval AND ($2 = '' OR template = $2)
ORDER BY updated_at, id
LIMIT $3`

// listUnconfirmedSQL reads the delivery-unconfirmed mails, oldest send
// first, through mail_unconfirmed_idx: $1 to $3 as in listMailsSQL, $4 and
// $5 the DeliveryConfirm rule.
var listUnconfirmedSQL = `
SELECT dedupe_key, order_id, template, status, sends, attempts, COALESCE(provider, ''),
       COALESCE(provider_message_id, ''), COALESCE(last_error, ''), COALESCE(last_error_class, ''),
       created_at, updated_at
FROM mail
WHERE ` + unconfirmed(4) + ` AND sent_at <= now() - $1::interval AND ($2 = '' OR template = $2)
ORDER BY sent_at, id
LIMIT $3`

// ErrUnconfirmedOff is ListMails' answer to an Unconfirmed filter on a
// store whose DeliveryConfirm rule flags nothing.
var ErrUnconfirmedOff = errors.New("no mail is checked for a delivery report: mail.delivery_confirm_after is 0, or no provider in use reports deliveries")

// ListMails returns up to f.Limit mails of f.Status matching f, the
// oldest change first, reading only the partial index of that status (its
// cost grows with the mails of that status, never with the finished
// ones), or, with f.Unconfirmed, the delivery-unconfirmed mails, the
// oldest send first. more is true when further mails match. It returns an
// error naming the field for an invalid filter, ErrUnconfirmedOff for
// f.Unconfirmed when the rule flags nothing, and a transient
// *mailtype.Error (ReasonDatabase) when the database is unreachable.
func (s *Store) ListMails(ctx context.Context, f MailFilter) (mails []MailSummary, more bool, err error) {
	if err := s.checkFilter(f); err != nil {
		return nil, false, err
	}
	what, sql, args := string(f.Status), fmt.Sprintf(listMailsSQL, f.Status), []any{f.OlderThan, f.Template, f.Limit + 1}
	if f.Unconfirmed {
		what, sql, args = "delivery-unconfirmed", listUnconfirmedSQL, append(args, s.confirm.args()...)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list %s mails: %w", what, interpretError(err))
	}
	mails, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (MailSummary, error) {
		var m MailSummary
		err := r.Scan(&m.DedupeKey, &m.OrderID, &m.Template, &m.Status, &m.Sends, &m.Attempts, &m.Provider,
			&m.ProviderMessageID, &m.LastError, &m.LastErrorClass, &m.CreatedAt, &m.UpdatedAt)
		return m, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("list %s mails: %w", what, interpretError(err))
	}
	if len(mails) > f.Limit {
		return mails[:f.Limit], true, nil
	}
	return mails, false, nil
}

// checkFilter returns the error of an invalid filter, naming the field.
func (s *Store) checkFilter(f MailFilter) error {
	switch {
	case f.Unconfirmed && f.Status != "":
		return fmt.Errorf("list mails: give a status or unconfirmed, not both (got status %q)", f.Status)
	case f.Unconfirmed && !s.confirm.On():
		return fmt.Errorf("list mails: %w", ErrUnconfirmedOff)
	case !f.Unconfirmed && !slices.Contains(ListableStatuses, f.Status):
		return fmt.Errorf("list mails: status must be one of %v, got %q", ListableStatuses, f.Status)
	case f.Limit <= 0 || f.OlderThan < 0:
		return fmt.Errorf("list mails: limit must be positive (got %d) and the age not negative (got %s)", f.Limit, f.OlderThan)
	}
	return nil
}
