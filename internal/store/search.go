package store

import (
	"context"
	"errors"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrBadQuery wraps every refusal of an invalid MailQuery; the message
// names the field.
var ErrBadQuery = errors.New("invalid search")

// MailQuery selects the mails of SearchMails. Every set field must match
// (AND); the zero query matches every mail. Keys and addresses are taken
// as given: the caller normalises them first (operator input rules).
type MailQuery struct {
	OrderID           string
	Recipient         string // an address; the domain matches case-insensitively
	DedupeKey         string
	EventID           string // a UUID (the input event, or a feedback event of the mail)
	ProviderMessageID string
	Template          string
	Provider          string
	Statuses          []mailtype.Status
	// Since and Until bound created_at (when the event was received):
	// Since <= created_at < Until; zero leaves that side open.
	Since, Until time.Time
	// Oldest sorts the oldest first; the default is the newest first.
	Oldest bool
	// Limit is the page size (1..MaxPageSize); Offset the mails skipped.
	Limit, Offset int
}

// MaxPageSize is the largest MailQuery.Limit.
const MaxPageSize = 200

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

// SearchMails returns the page of q's mails. An invalid query is an error
// wrapping ErrBadQuery; an unreachable database a transient
// *mailtype.Error (ReasonDatabase).
func (s *Store) SearchMails(ctx context.Context, q MailQuery) (MailPage, error) {
	return MailPage{}, errors.New("search mails: not implemented")
}
