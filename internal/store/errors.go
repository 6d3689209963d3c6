package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// RefusedError reports that PostgreSQL answered one of the store's
// statements with an error response other than an unavailable or
// overloaded server, a serialization failure or deadlock, or an
// administrator's shutdown: a data exception (class 22), an integrity or
// syntax error, a read-only transaction (25006), a missing privilege
// (42501). Values are checked before they reach SQL (IngestItem.Check), so
// a refusal is never the input's fault: it is a bug of the statement or a
// database that does not take this write now. It always comes wrapped in a
// transient *mailtype.Error (ReasonDatabase): callers keep their work and
// retry with backoff, and never dead-letter or fail an input for it.
type RefusedError struct {
	// SQLState is the five-character SQLSTATE code, e.g. "22P02".
	SQLState string
	// Err is the driver's error.
	Err error
}

func (e *RefusedError) Error() string {
	return "the database refused the statement: " + e.Err.Error()
}

func (e *RefusedError) Unwrap() error { return e.Err }

// interpretError classifies a pgx error at the boundary: every error is a
// transient database error (mailtype.ReasonDatabase), and one that
// PostgreSQL answered to a statement, except for the classes that say the
// server is unavailable, carries a *RefusedError with its SQLSTATE.
// pgx.ErrNoRows becomes ErrNotFound. Context errors pass through
// unchanged.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:min(2, len(pgErr.Code))] {
		case "08", "53", "57": // connection exception, insufficient resources, operator intervention
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
		case "40": // serialization failure, deadlock
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
		}
		return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, &RefusedError{SQLState: pgErr.Code, Err: explainTLS(err)})
	}
	// Anything else from the driver (a network error, a closed pool, an
	// unexpected EOF, a failed TLS handshake: explained) is an unavailable
	// database: retrying is safe, losing is not.
	return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, explainTLS(err))
}
