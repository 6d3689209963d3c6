package store

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// interpretError classifies a pgx error at the boundary: connection
// failures, serialization failures, deadlocks and admin shutdowns are
// transient database errors; constraint and syntax errors stay as they are
// (they are bugs or decided by the caller). pgx.ErrNoRows becomes
// ErrNotFound. Context errors pass through unchanged.
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
		switch pgErr.Code[:2] {
		case "08", "53", "57": // connection exception, insufficient resources, operator intervention
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
		case "40": // serialization failure, deadlock
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
		}
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.SafeToRetry(err) || isConnectError(err) {
		return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
	}
	// Anything else from the driver (closed pool, unexpected EOF) is
	// treated as an unavailable database: retrying is safe, losing is not.
	return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// IsUniqueViolation reports whether err is a unique_violation (23505).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
