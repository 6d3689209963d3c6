package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// ConsoleSession is one login of the support console (table
// console_session, migration 00260): the SHA-256 of its random id (the
// cookie carries the id itself), the user's name, the SHA-256 of the
// user's password hash at login, and its lifetime.
type ConsoleSession struct {
	IDSum           [sha256.Size]byte
	User            string
	HashFingerprint []byte
	Created         time.Time
	Expires         time.Time
}

// MaxExpiredSessionsDeleted bounds the expired sessions one
// CreateConsoleSession deletes.
const MaxExpiredSessionsDeleted = 1000

const insertConsoleSessionSQL = `INSERT INTO console_session (id_sha256, user_name, hash_fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5)`

const deleteExpiredSessionsSQL = `DELETE FROM console_session WHERE id_sha256 IN (
    SELECT id_sha256 FROM console_session WHERE expires_at <= $1 LIMIT $2)`

// CreateConsoleSession stores a new session, and first deletes up to
// MaxExpiredSessionsDeleted sessions expired at se.Created. A session
// without a user or with a zero time is refused (a bug of the caller).
func (s *Store) CreateConsoleSession(ctx context.Context, se ConsoleSession) error {
	if se.User == "" || se.Created.IsZero() || !se.Expires.After(se.Created) {
		return errors.New("console session: a user and an expiry after its creation are required")
	}
	if _, err := s.pool.Exec(ctx, deleteExpiredSessionsSQL, se.Created, MaxExpiredSessionsDeleted); err != nil {
		return fmt.Errorf("delete expired console sessions: %w", interpretError(err))
	}
	if _, err := s.pool.Exec(ctx, insertConsoleSessionSQL, se.IDSum[:], se.User, se.HashFingerprint, se.Created, se.Expires); err != nil {
		return fmt.Errorf("store a console session: %w", interpretError(err))
	}
	return nil
}

// ConsoleSessionByID returns the session whose id has the SHA-256 sum,
// expired or not (the caller compares Expires with its clock);
// ErrNotFound when there is none (never created, or logged out).
func (s *Store) ConsoleSessionByID(ctx context.Context, sum [sha256.Size]byte) (ConsoleSession, error) {
	se := ConsoleSession{IDSum: sum}
	err := s.pool.QueryRow(ctx, `SELECT user_name, hash_fingerprint, created_at, expires_at
FROM console_session WHERE id_sha256 = $1`, sum[:]).Scan(&se.User, &se.HashFingerprint, &se.Created, &se.Expires)
	if err != nil {
		return ConsoleSession{}, interpretError(err)
	}
	return se, nil
}

// DeleteConsoleSession ends the session whose id has the SHA-256 sum
// (logout); deleting one that does not exist is not an error.
func (s *Store) DeleteConsoleSession(ctx context.Context, sum [sha256.Size]byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_session WHERE id_sha256 = $1`, sum[:]); err != nil {
		return fmt.Errorf("delete a console session: %w", interpretError(err))
	}
	return nil
}
