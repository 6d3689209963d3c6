package store

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// explainTLS adds a hint naming the database.url parameter to fix to a
// certificate failure: the driver's TLS errors (tlsconfig.Explain: the
// server's certificate against sslrootcert and the host) and PostgreSQL's
// refusals of the client certificate (SQLSTATE 28000 under pg_hba method
// cert or clientcert=verify-*). Any other error comes back unchanged.
func explainTLS(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return tlsconfig.Explain(err, tlsconfig.DatabaseKeys)
	}
	if pgErr.Code != sqlAuthorization {
		return err
	}
	switch msg := pgErr.Message; {
	case strings.Contains(msg, "requires a valid client certificate"):
		return &tlsconfig.Explained{Err: err, Hint: "the server requires a client certificate: set sslcert and sslkey in database.url"}
	case strings.Contains(msg, "certificate authentication failed"), strings.Contains(msg, "certificate is not valid for"):
		return &tlsconfig.Explained{Err: err, Hint: "the CN of the certificate of sslcert in database.url must be the database user (or be mapped to it in pg_ident.conf)"}
	}
	return err
}
