package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// SuppressionSource says who put an address on the suppression list
// (column suppression.source, a closed set).
type SuppressionSource string

// The sources of a suppression entry.
const (
	// SourceBounce: a provider webhook reported a permanent bounce.
	SourceBounce SuppressionSource = "webhook/bounce"
	// SourceComplaint: a provider webhook reported a spam complaint.
	SourceComplaint SuppressionSource = "webhook/complaint"
	// SourceOperator: `mailsvc suppression add`.
	SourceOperator SuppressionSource = "operator"
	// SourceReject: the SMTP relay refused the recipient for good during
	// the send (a reply with an enhanced code of suppression.smtp_codes).
	SourceReject SuppressionSource = "smtp/reject"
)

// MaxSuppressionReason bounds the reason kept with an entry, in bytes.
const MaxSuppressionReason = 200

// ErrInvalidAddress is returned for an address the suppression list cannot
// hold: empty once trimmed, without an '@' between a local part and a
// domain, with white space or a control character inside, or over 254
// bytes (RFC 5321's limit on a path).
var ErrInvalidAddress = errors.New("not an e-mail address")

// Suppression is one entry of the suppression list. Address is in the
// compared form (mailsvc_address_key, migration 00090: trimmed, domain
// lower-cased, local part as given).
type Suppression struct {
	Address   string            `json:"address"`
	Reason    string            `json:"reason"`
	Source    SuppressionSource `json:"source"`
	CreatedAt time.Time         `json:"created_at"`
}

// checkAddress refuses what ErrInvalidAddress describes.
func checkAddress(address string) error {
	a := strings.TrimSpace(address)
	at := strings.LastIndexByte(a, '@')
	if at <= 0 || at == len(a)-1 || len(a) > 254 ||
		strings.ContainsFunc(a, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("%w: %q", ErrInvalidAddress, address)
	}
	return nil
}

// reasonText is a reason as the list keeps it: sanitized
// (mailtype.Sanitize: no address, no control character), trimmed, at most
// MaxSuppressionReason bytes, cut on a rune boundary.
func reasonText(reason string) string {
	reason = strings.TrimSpace(mailtype.Sanitize(reason))
	if len(reason) <= MaxSuppressionReason {
		return reason
	}
	cut := MaxSuppressionReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return strings.TrimSpace(reason[:cut])
}

const suppressSQL = `
INSERT INTO suppression (address, reason, source) VALUES (mailsvc_address_key($1), $2, $3)
ON CONFLICT (address) DO NOTHING`

const suppressionColumns = `address, reason, source, created_at`

// Suppress puts address on the suppression list with reason (trimmed to
// MaxSuppressionReason bytes) and source. An address already on the list
// keeps its entry unchanged (the first reason, source and time). It
// returns the entry now on the list and whether this call added it;
// ErrInvalidAddress for an address the list cannot hold; a transient
// *mailtype.Error (ReasonDatabase) when the database fails.
func (s *Store) Suppress(ctx context.Context, address, reason string, source SuppressionSource) (Suppression, bool, error) {
	if err := checkAddress(address); err != nil {
		return Suppression{}, false, err
	}
	var out Suppression
	var added bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		added, err = suppress(ctx, tx, address, reason, source)
		if err != nil {
			return err
		}
		out, err = scanSuppression(tx.QueryRow(ctx, `SELECT `+suppressionColumns+` FROM suppression WHERE address = mailsvc_address_key($1)`, address))
		return err
	})
	if err != nil {
		return Suppression{}, false, fmt.Errorf("suppress address: %w", interpretError(err))
	}
	return out, added, nil
}

// suppress inserts one entry inside tx; added is false when the address
// was on the list already.
func suppress(ctx context.Context, tx pgx.Tx, address, reason string, source SuppressionSource) (bool, error) {
	tag, err := tx.Exec(ctx, suppressSQL, address, reasonText(reason), string(source))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Unsuppress takes address (compared normalised) off the suppression list
// and returns the entry it removed: mails to it are sent again from their
// next claim. ErrNotFound when it was not on the list.
func (s *Store) Unsuppress(ctx context.Context, address string) (Suppression, error) {
	e, err := scanSuppression(s.pool.QueryRow(ctx,
		`DELETE FROM suppression WHERE address = mailsvc_address_key($1) RETURNING `+suppressionColumns, address))
	if err != nil {
		return Suppression{}, fmt.Errorf("unsuppress address: %w", interpretError(err))
	}
	return e, nil
}

// Suppressions returns the whole suppression list, oldest entry first.
func (s *Store) Suppressions(ctx context.Context) ([]Suppression, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+suppressionColumns+` FROM suppression ORDER BY created_at, address`)
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", interpretError(err))
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Suppression, error) { return scanSuppression(r) })
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", interpretError(err))
	}
	return list, nil
}

func scanSuppression(row pgx.Row) (Suppression, error) {
	var e Suppression
	err := row.Scan(&e.Address, &e.Reason, &e.Source, &e.CreatedAt)
	return e, err
}

// suppressRefusedSQL suppresses the recipient of mail $1 with reason $2
// (source smtp/reject); an address on the list already keeps its entry.
const suppressRefusedSQL = `
INSERT INTO suppression (address, reason, source)
SELECT mailsvc_address_key(to_email), $2, 'smtp/reject' FROM mail
WHERE id = $1 AND position('@' IN to_email) > 0
ON CONFLICT (address) DO NOTHING`

// suppressRefused suppresses the recipient of each attempt that asks for
// it (Outcome.Suppress) and whose outcome was written, inside the
// outcome's transaction. Such refusals are rare: one statement each.
func suppressRefused(ctx context.Context, c dbtx, as []Attempt, res []AttemptResult) error {
	for i, a := range as {
		if !a.Outcome.Suppress || res[i].Err != nil {
			continue
		}
		if _, err := c.Exec(ctx, suppressRefusedSQL, a.ID, reasonText(a.Outcome.lastError())); err != nil {
			return fmt.Errorf("suppress the recipient of mail %d: %w", a.ID, err)
		}
	}
	return nil
}
