package store

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

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
