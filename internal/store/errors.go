package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// This file is the store's one translation of what pgx and PostgreSQL say
// into mailsvc's errors: interpretError for every statement, the SQLSTATEs
// the store decides on, and parseURLError for a connection string pgx
// cannot parse.

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// The SQLSTATEs (PostgreSQL, Appendix A) some path of the store decides
// on by itself; interpretError classifies every other code by its class.
const (
	// sqlReadOnly is read_only_sql_transaction: a standby, or
	// default_transaction_read_only (IsWriteRefused, CheckWritable).
	sqlReadOnly = "25006"
	// sqlNoPrivilege is insufficient_privilege (IsWriteRefused).
	sqlNoPrivilege = "42501"
	// sqlUndefinedTable is undefined_table: a schema older than the
	// table a read needs (the audit log's timeline).
	sqlUndefinedTable = "42P01"
	// sqlDuplicateStatement is duplicate_prepared_statement and
	// sqlNoStatement invalid_sql_statement_name: a pooler that lost or
	// kept a session's prepared statements (the pooling probe).
	sqlDuplicateStatement = "42P05"
	sqlNoStatement        = "26000"
	// sqlAuthorization is invalid_authorization_specification: among
	// others, a refused client certificate (explainTLS).
	sqlAuthorization = "28000"
)

// unavailableClasses are the SQLSTATE classes of a server that cannot take
// the statement now rather than refusing it: connection exception (08),
// transaction rollback (40: serialization failure, deadlock), insufficient
// resources (53), operator intervention (57: shutdown, a cancelled query).
var unavailableClasses = map[string]bool{"08": true, "40": true, "53": true, "57": true}

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

// interpretError is the one translation of a pgx error at the store's
// boundary; every path of the store returns what it makes of an error:
//
//   - an error the store has decided already passes through unchanged:
//     ErrNotFound, a *StateError (an operator's action the mail's state
//     refuses), a *mailtype.Error (a cancel that kept racing, a report
//     that came too early, an error translated here before);
//   - pgx.ErrNoRows becomes ErrNotFound;
//   - a context's end (context.Canceled, context.DeadlineExceeded, also
//     inside a connect error) passes through unchanged;
//   - PostgreSQL's answer (*pgconn.PgError) of an unavailableClasses
//     class is a transient error, ReasonDatabase;
//   - any other answer is a transient error, ReasonDatabase, carrying a
//     *RefusedError with its SQLSTATE (a refused client certificate
//     explained by explainTLS);
//   - anything else from the driver (a network error, a failed connect,
//     a closed pool, an unexpected EOF, a failed TLS handshake: explained)
//     is an unavailable database, a transient error, ReasonDatabase:
//     retrying is safe, losing is not.
//
// So every error is transient: the store never makes an input or a mail
// fail for the database's sake.
func interpretError(err error) error {
	if err == nil || decided(err) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if unavailableClasses[pgErr.Code[:min(2, len(pgErr.Code))]] {
			return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, err)
		}
		return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, &RefusedError{SQLState: pgErr.Code, Err: explainTLS(err)})
	}
	return mailtype.NewError(mailtype.Transient, mailtype.ReasonDatabase, explainTLS(err))
}

// decided reports whether err was decided in the store already (see
// interpretError).
func decided(err error) bool {
	var se *StateError
	var me *mailtype.Error
	return errors.Is(err, ErrNotFound) || errors.As(err, &se) || errors.As(err, &me)
}

// sqlState is the SQLSTATE of the first PostgreSQL error in err's chain, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsWriteRefused reports whether err says that a database that answers
// refused a write of ours: read_only_sql_transaction (25006: a standby, or
// default_transaction_read_only) or insufficient_privilege (42501). Such a
// refusal is about the database, never about the data written.
func IsWriteRefused(err error) bool {
	switch sqlState(err) {
	case sqlReadOnly, sqlNoPrivilege:
		return true
	}
	return false
}

// parseURLError reports a connection string pgx could not parse without
// quoting it. pgconn.ParseConfigError quotes the string with its
// password masked "on a best-effort basis" (its own words): a malformed
// string, or one with spaces around '=' ("password = pw"), keeps the
// password. This keeps pgx's fixed reason and the cause beneath it, with
// a URL parser's quote of the string dropped and any secret still in the
// cause masked (mailtype.ConnSecrets).
func parseURLError(conn string, err error) error {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return mailtype.NewRedactor(mailtype.ConnSecrets(conn)...).Error(fmt.Errorf("parse database url: %w", err))
	}
	cause := pce.Unwrap()
	reason := pce.Error()
	if cause != nil {
		reason = strings.TrimSuffix(reason, " ("+cause.Error()+")")
	}
	// pgx writes "cannot parse `<string>`: <reason>"; the reason is its own
	// fixed text, never the input.
	if i := strings.LastIndex(reason, "`: "); i >= 0 {
		reason = reason[i+3:]
	} else {
		reason = "unparsable"
	}
	if cause == nil {
		return fmt.Errorf("database url cannot be parsed: %s", reason)
	}
	var ue *url.Error
	if errors.As(cause, &ue) {
		cause = ue.Err // url.Error quotes the whole URL
	}
	text := mailtype.NewRedactor(mailtype.ConnSecrets(conn)...).Redact(cause.Error())
	return fmt.Errorf("database url cannot be parsed: %s (%s)", reason, text)
}
