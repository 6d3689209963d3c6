package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TransientRule is when transient bounces suppress an address
// (suppression.transient_bounces, _window, _expiry): Bounces of them
// within Window put it on the list until Expiry after the last one.
// Bounces 0 turns it off: a transient bounce is then only recorded.
type TransientRule struct {
	Bounces int
	Window  time.Duration
	Expiry  time.Duration
}

// countTransientSQL counts the transient bounces of address $1 in the
// last $2 seconds, the one just recorded included.
const countTransientSQL = `
SELECT count(*) FROM suppression_event
WHERE address = mailsvc_address_key($1) AND kind = 'transient' AND at > now() - $2::int * interval '1 second'`

// noteTransient records a transient bounce of address and, when it is
// the rule's Bounces-th within its Window, suppresses the address until
// Expiry from now (source: SourceTransient or SourceDSNTransient). It reports whether the
// address was added to the list.
func (s *Store) noteTransient(ctx context.Context, tx dbtx, address, reason string, source SuppressionSource) (bool, error) {
	reason = reasonText(reason)
	// Concurrent reports of one address count one after the other: under
	// READ COMMITTED each would otherwise miss the others' events.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('mailsvc transient ' || mailsvc_address_key($1)))`, address); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, insertSuppressionEventSQL, address, "transient", string(source), reason); err != nil {
		return false, err
	}
	r := s.transient
	if r.Bounces <= 0 {
		return false, nil
	}
	var n int
	if err := tx.QueryRow(ctx, countTransientSQL, address, int32(r.Window/time.Second)).Scan(&n); err != nil {
		return false, err
	}
	if n < r.Bounces {
		return false, nil
	}
	until := time.Now().Add(r.Expiry).UTC()
	return suppressUntil(ctx, tx, address, fmt.Sprintf("%d transient bounces within %s; last: %s", n, r.Window, reason),
		source, &until)
}

// SuppressionEvent is one line of an address's history: a report that
// listed it (suppressed), named it while listed (seen_again), a transient
// bounce, or its removal by an operator.
type SuppressionEvent struct {
	At     time.Time         `json:"at"`
	Kind   string            `json:"kind"`
	Source SuppressionSource `json:"source"`
	Reason string            `json:"reason"`
}

// SuppressionHistory is what `mailsvc suppression show` prints: the entry
// in force (nil when none) and every event of the address, oldest first.
type SuppressionHistory struct {
	Address string             `json:"address"`
	Entry   *Suppression       `json:"entry,omitempty"`
	Events  []SuppressionEvent `json:"events"`
}

// SuppressionHistoryOf returns address's entry and history (compared
// normalised). ErrNotFound when the address has neither.
func (s *Store) SuppressionHistoryOf(ctx context.Context, address string) (SuppressionHistory, error) {
	h := SuppressionHistory{Address: address}
	e, err := scanSuppression(s.pool.QueryRow(ctx, `SELECT `+suppressionColumns+` FROM suppression
WHERE address = mailsvc_address_key($1) AND `+activeSuppression, address))
	switch {
	case err == nil:
		h.Entry, h.Address = &e, e.Address
	case !errors.Is(err, pgx.ErrNoRows):
		return h, fmt.Errorf("read suppression: %w", interpretError(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT at, kind, source, reason FROM suppression_event
WHERE address = mailsvc_address_key($1) ORDER BY at, id`, address)
	if err != nil {
		return h, fmt.Errorf("read suppression history: %w", interpretError(err))
	}
	h.Events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[SuppressionEvent])
	if err != nil {
		return h, fmt.Errorf("read suppression history: %w", interpretError(err))
	}
	if h.Entry == nil && len(h.Events) == 0 {
		return h, ErrNotFound
	}
	return h, nil
}
