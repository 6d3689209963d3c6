package store

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// Every SQLSTATE the store knows, and a sample of each class it treats
// alike, translated by the one translator: transient, ReasonDatabase, and
// a *RefusedError naming the code unless the server was unavailable.
func TestInterpretErrorSQLStates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, name    string
		refused       bool // carries a *RefusedError
		writeRefused  bool // IsWriteRefused
		statementLoss bool // isStatementLoss
	}{
		{"08000", "connection_exception", false, false, false},
		{"08003", "connection_does_not_exist", false, false, false},
		{"08006", "connection_failure", false, false, false},
		{"08P01", "protocol_violation", false, false, false},
		{"40001", "serialization_failure", false, false, false},
		{"40P01", "deadlock_detected", false, false, false},
		{"53100", "disk_full", false, false, false},
		{"53200", "out_of_memory", false, false, false},
		{"53300", "too_many_connections", false, false, false},
		{"57014", "query_canceled", false, false, false},
		{"57P01", "admin_shutdown", false, false, false},
		{"57P02", "crash_shutdown", false, false, false},
		{"57P03", "cannot_connect_now", false, false, false},
		{"22001", "string_data_right_truncation", true, false, false},
		{"22P02", "invalid_text_representation", true, false, false},
		{"22P05", "untranslatable_character", true, false, false},
		{"23503", "foreign_key_violation", true, false, false},
		{"23505", "unique_violation", true, false, false},
		{"23514", "check_violation", true, false, false},
		{sqlReadOnly, "read_only_sql_transaction", true, true, false},
		{sqlNoPrivilege, "insufficient_privilege", true, true, false},
		{sqlNoStatement, "invalid_sql_statement_name", true, false, true},
		{sqlDuplicateStatement, "duplicate_prepared_statement", true, false, true},
		{sqlUndefinedTable, "undefined_table", true, false, false},
		{"42703", "undefined_column", true, false, false},
		{"42601", "syntax_error", true, false, false},
		{sqlAuthorization, "invalid_authorization_specification", true, false, false},
		{"28P01", "invalid_password", true, false, false},
		{"3D000", "invalid_catalog_name", true, false, false},
		{"0A000", "feature_not_supported", true, false, false},
		{"P0001", "raise_exception", true, false, false},
		{"XX000", "internal_error", true, false, false},
		{"4", "a code shorter than its class", true, false, false},
		{"", "no code", true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pgErr := &pgconn.PgError{Severity: "ERROR", Code: c.code, Message: c.name}
			for _, in := range []error{pgErr, fmt.Errorf("exec: %w", pgErr)} {
				got := interpretError(in)
				require.Equal(t, mailtype.Transient, mailtype.ClassOf(got))
				require.Equal(t, mailtype.ReasonDatabase, mailtype.ReasonOf(got))
				require.ErrorIs(t, got, pgErr)
				var re *RefusedError
				require.Equal(t, c.refused, errors.As(got, &re))
				if c.refused {
					require.Equal(t, c.code, re.SQLState)
				}
				require.Equal(t, c.writeRefused, IsWriteRefused(got))
				require.Equal(t, c.statementLoss, isStatementLoss(got))
				require.Equal(t, c.code, sqlState(got))
				require.Same(t, got, interpretError(got), "a translated error passes through")
			}
		})
	}
}

// What is not PostgreSQL's answer: errors the store decided, the end of a
// context, and a database that cannot be reached.
func TestInterpretErrorOtherErrors(t *testing.T) {
	t.Parallel()
	connectErr := connectError(t)
	racing := mailtype.Errorf(mailtype.Transient, mailtype.ReasonDatabase, "cancel raced")
	permanent := mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidField, "order_id is not valid UTF-8")
	state := &StateError{DedupeKey: "order-confirmed:1", Status: mailtype.StatusSent, Action: "reconcile"}
	for _, c := range []struct {
		name      string
		in        error
		same      bool // returned unchanged
		want      error
		class     mailtype.Class // "" for an error that is no *mailtype.Error
		explained bool           // carries a *tlsconfig.Explained
	}{
		{"nil", nil, true, nil, "", false},
		{"no rows", pgx.ErrNoRows, false, ErrNotFound, "", false},
		{"no rows, wrapped", fmt.Errorf("scan: %w", pgx.ErrNoRows), false, ErrNotFound, "", false},
		{"not found", ErrNotFound, true, ErrNotFound, "", false},
		{"not found, wrapped", fmt.Errorf("read: %w", ErrNotFound), true, ErrNotFound, "", false},
		{"state", state, true, ErrWrongState, "", false},
		{"state, wrapped", fmt.Errorf("resend: %w", state), true, ErrWrongState, "", false},
		{"classified transient", racing, true, nil, mailtype.Transient, false},
		{"classified permanent", permanent, true, nil, mailtype.Permanent, false},
		{"canceled", context.Canceled, true, context.Canceled, "", false},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), true, context.DeadlineExceeded, "", false},
		{"connect error", connectErr, false, nil, mailtype.Transient, false},
		{"refused dial", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false, syscall.ECONNREFUSED, mailtype.Transient, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, false, io.ErrUnexpectedEOF, mailtype.Transient, false},
		{"closed pool", errors.New("closed pool"), false, nil, mailtype.Transient, false},
		{"untrusted certificate", tls509Error, false, nil, mailtype.Transient, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := interpretError(c.in)
			if c.same {
				require.Equal(t, c.in, got)
			}
			if c.want != nil {
				require.ErrorIs(t, got, c.want)
			}
			if c.in != nil && !c.same && !errors.Is(c.want, ErrNotFound) {
				require.ErrorIs(t, got, c.in, "the driver's error stays in the chain")
			}
			var me *mailtype.Error
			require.Equal(t, c.class != "", errors.As(got, &me))
			if c.class != "" {
				require.Equal(t, c.class, me.Class)
				isPermanent := errors.Is(c.in, permanent) // only the one case passes it, unwrapped
				require.Equal(t, isPermanent, me.Reason == mailtype.ReasonInvalidField)
				require.Equal(t, !isPermanent, me.Reason == mailtype.ReasonDatabase)
			}
			var re *RefusedError
			require.False(t, errors.As(got, &re), "only PostgreSQL refuses")
			var ex *tlsconfig.Explained
			require.Equal(t, c.explained, errors.As(got, &ex))
			require.False(t, IsWriteRefused(got))
		})
	}
}

// tls509Error is a server certificate signed by a CA that sslrootcert
// does not hold, as the driver's handshake reports it.
var tls509Error = x509.UnknownAuthorityError{}

// A refused client certificate (28000 with PostgreSQL's words for it) is
// a refusal explained with the database.url parameters to set.
func TestInterpretErrorExplainsARefusedClientCertificate(t *testing.T) {
	t.Parallel()
	pgErr := &pgconn.PgError{Severity: "FATAL", Code: sqlAuthorization, Message: "connection requires a valid client certificate"}
	got := interpretError(pgErr)
	var re *RefusedError
	require.ErrorAs(t, got, &re)
	var ex *tlsconfig.Explained
	require.ErrorAs(t, re.Err, &ex)
	require.Contains(t, ex.Hint, "set sslcert and sslkey in database.url")
}

// connectError is pgconn's error for a connection that was refused.
func connectError(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().(*net.TCPAddr)
	require.NoError(t, l.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable", addr.Port))
	var ce *pgconn.ConnectError
	require.ErrorAs(t, err, &ce)
	return err
}
