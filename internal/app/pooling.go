package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/store"
)

// checkPooling refuses to start, before any component runs, when
// database.url leads to a transaction pooler (PgBouncer's pool_mode =
// transaction) that loses pgx's prepared statements: left to run, the
// first statements fail with `prepared statement "stmtcache_…" already
// exists (42P05)`. The error wraps store.ErrTransactionPooling and names
// the key and the fixes (docs/deploying.md, "PostgreSQL through
// PgBouncer"). Behind such a pooler in a mode that works, relay.listen
// true is logged as a warning: notifications never arrive there, so the
// relay finds new rows by polling.
func checkPooling(ctx context.Context, st *store.Store, cfg *config.Config, log *slog.Logger) error {
	p, err := st.ProbePooling(ctx)
	if err != nil {
		return &UnavailableError{Err: fmt.Errorf("probe database.url for a transaction pooler: %w", err)}
	}
	if !p.Shared {
		return nil
	}
	if p.StatementsBreak {
		return fmt.Errorf("%w: database.url (MAILSVC_DATABASE_URL) leads to a transaction pooler "+
			"(PgBouncer with pool_mode = transaction), which loses the prepared statements mailsvc caches "+
			"(prepared statement \"stmtcache_…\" already exists, 42P05): add default_query_exec_mode=exec "+
			"to database.url, or use pool_mode = session, or PgBouncer 1.21 or later with "+
			"max_prepared_statements > 0 (docs/deploying.md)", store.ErrTransactionPooling)
	}
	if cfg.Relay.Listen && slices.Contains(cfg.Serve.Roles, config.RoleRelay) {
		log.Warn("database.url leads to a transaction pooler (PgBouncer pool_mode = transaction): LISTEN notifications "+
			"do not arrive through it, so the relay finds new outbox rows by polling; set relay.listen: false",
			"poll_interval", cfg.Relay.PollInterval)
	}
	return nil
}
