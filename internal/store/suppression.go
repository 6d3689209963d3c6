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
	// SourceTransient: suppression.transient_bounces transient bounces
	// within suppression.transient_window; the entry expires.
	SourceTransient SuppressionSource = "webhook/transient"
	// SourceDSN: a delivery status notification (RFC 3464) to the mail's
	// VERP address reported a permanent failure.
	SourceDSN SuppressionSource = "dsn/bounce"
	// SourceDSNTransient: transient failures reported by notifications,
	// as SourceTransient.
	SourceDSNTransient SuppressionSource = "dsn/transient"
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
	Address string `json:"address"`
	// Reason and Source are the first report's: a later one counts in
	// Seen and LastSeen only (but a permanent report makes an expiring
	// entry permanent, with its own reason and source).
	Reason    string            `json:"reason"`
	Source    SuppressionSource `json:"source"`
	CreatedAt time.Time         `json:"created_at"`
	LastSeen  time.Time         `json:"last_seen"`
	// Seen counts the reports that named the address while listed.
	Seen int `json:"seen"`
	// ExpiresAt ends an entry that transient bounces made; nil is
	// permanent, until an operator removes it.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
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

// suppressSQL adds an entry, or counts a report of an address listed
// already: $1 address, $2 reason, $3 source, $4 expiry (NULL: permanent).
// An entry that expired is replaced; an expiring one is made permanent by
// a permanent report, with that report's reason and source. added is
// true for a new entry.
const suppressSQL = `
INSERT INTO suppression AS s (address, reason, source, expires_at) VALUES (mailsvc_address_key($1), $2, $3, $4)
ON CONFLICT (address) DO UPDATE SET
    last_seen  = now(),
    seen       = CASE WHEN s.expires_at <= now() THEN 1 ELSE s.seen + 1 END,
    created_at = CASE WHEN s.expires_at <= now() THEN now() ELSE s.created_at END,
    reason     = CASE WHEN s.expires_at <= now() OR (s.expires_at IS NOT NULL AND excluded.expires_at IS NULL)
                      THEN excluded.reason ELSE s.reason END,
    source     = CASE WHEN s.expires_at <= now() OR (s.expires_at IS NOT NULL AND excluded.expires_at IS NULL)
                      THEN excluded.source ELSE s.source END,
    expires_at = CASE WHEN s.expires_at <= now() THEN excluded.expires_at
                      WHEN s.expires_at IS NULL OR excluded.expires_at IS NULL THEN NULL
                      ELSE greatest(s.expires_at, excluded.expires_at) END
RETURNING xmax = 0 OR seen = 1`

const suppressionColumns = `address, reason, source, created_at, last_seen, seen, expires_at`

// activeSuppression is the SQL condition of an entry in force.
const activeSuppression = `(expires_at IS NULL OR expires_at > now())`

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

// suppress adds or counts one entry inside tx (suppressSQL), with no
// expiry, and writes its history row; added is false when the address was
// listed already.
func suppress(ctx context.Context, tx dbtx, address, reason string, source SuppressionSource) (bool, error) {
	return suppressUntil(ctx, tx, address, reason, source, nil)
}

// suppressUntil is suppress with an expiry (nil: permanent).
func suppressUntil(ctx context.Context, tx dbtx, address, reason string, source SuppressionSource, expires *time.Time) (bool, error) {
	reason = reasonText(reason)
	var added bool
	if err := tx.QueryRow(ctx, suppressSQL, address, reason, string(source), expires).Scan(&added); err != nil {
		return false, err
	}
	kind := "seen_again"
	if added {
		kind = "suppressed"
	}
	_, err := tx.Exec(ctx, insertSuppressionEventSQL, address, kind, string(source), reason)
	return added, err
}

const insertSuppressionEventSQL = `
INSERT INTO suppression_event (address, kind, source, reason) VALUES (mailsvc_address_key($1), $2, $3, $4)`

// Unsuppress takes address (compared normalised) off the suppression list
// and returns the entry it removed: mails to it are sent again from their
// next claim. ErrNotFound when it was not on the list.
func (s *Store) Unsuppress(ctx context.Context, address string) (Suppression, error) {
	var e Suppression
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		e, err = scanSuppression(tx.QueryRow(ctx,
			`DELETE FROM suppression WHERE address = mailsvc_address_key($1) AND `+activeSuppression+` RETURNING `+suppressionColumns, address))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertSuppressionEventSQL, address, "removed", string(SourceOperator), "removed by an operator")
		return err
	})
	if err != nil {
		return Suppression{}, fmt.Errorf("unsuppress address: %w", interpretError(err))
	}
	return e, nil
}

// Suppressions returns the entries in force, oldest first (an expired
// one is left out: it no longer stops a mail).
func (s *Store) Suppressions(ctx context.Context) ([]Suppression, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+suppressionColumns+` FROM suppression WHERE `+activeSuppression+` ORDER BY created_at, address`)
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
	err := row.Scan(&e.Address, &e.Reason, &e.Source, &e.CreatedAt, &e.LastSeen, &e.Seen, &e.ExpiresAt)
	return e, err
}

// suppressRefused suppresses the recipient of each attempt that asks for
// it (Outcome.Suppress) and whose outcome was written, inside the
// outcome's transaction. Such refusals are rare: one statement each.
func suppressRefused(ctx context.Context, c dbtx, as []Attempt, res []AttemptResult) error {
	for i, a := range as {
		if !a.Outcome.Suppress || res[i].Err != nil {
			continue
		}
		var to string
		if err := c.QueryRow(ctx, `SELECT to_email FROM mail WHERE id = $1`, a.ID).Scan(&to); err != nil {
			return fmt.Errorf("read the recipient of mail %d: %w", a.ID, err)
		}
		if checkAddress(to) != nil {
			continue
		}
		if _, err := suppress(ctx, c, to, a.Outcome.lastError(), SourceReject); err != nil {
			return fmt.Errorf("suppress the recipient of mail %d: %w", a.ID, err)
		}
	}
	return nil
}
