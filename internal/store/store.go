// Package store owns all SQL of mailsvc and the pgx connection pool. Every
// state change is one short autocommit statement or one short transaction;
// no transaction is held open across a call to a mail provider or the
// broker. Errors from pgx are classified here (interpretError) so that no
// package above sees pgx.
package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the database handle of mailsvc. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// eventsExchange is written into outbox rows (outbox.exchange).
	eventsExchange string
	// notices renders cancellation notices; nil writes none.
	notices NoticeRenderer
	// recipientLimit holds the mails over the per-recipient limit.
	recipientLimit RecipientLimit
	// accountSuppression lets a provider report that names no mail of
	// this deployment suppress the addresses it gives.
	accountSuppression bool
	// transient is when transient bounces suppress an address.
	transient TransientRule
	// confirm is the rule of the delivery-unconfirmed flag.
	confirm DeliveryConfirm
}

// Options configures Open.
type Options struct {
	// URL is a pgx connection string; a search_path parameter selects the
	// schema (tests use one schema each).
	URL string
	// MaxConns is the pool size; 0 keeps pgx's default.
	MaxConns int32
	// EventsExchange is the exchange outbox rows are addressed to
	// (amqp.events_exchange); "" means "mail.events".
	EventsExchange string
	// Notices renders the cancellation notice a cancel that came too late
	// writes (mail.cancel_notice); nil writes none.
	Notices NoticeRenderer
	// RecipientLimit is the per-recipient safety limit of Ingest; the zero
	// value is off.
	RecipientLimit RecipientLimit
	// AccountSuppression is suppression.scope "account": the provider
	// account serves this deployment alone, so a bounce or complaint that
	// names no mail of it still suppresses the addresses it gives. False
	// ("deployment", the default): such a report suppresses nothing.
	AccountSuppression bool
	// Transient is when transient bounces suppress an address; the zero
	// value never does.
	Transient TransientRule
	// DeliveryConfirm is the rule of the delivery-unconfirmed flag of
	// Stats, ListMails and the mail views; the zero value flags nothing.
	DeliveryConfirm DeliveryConfirm
}

// Open connects a pool and checks that the database answers. It returns an
// error classified transient (mailtype.ReasonDatabase) when the server
// cannot be reached.
func Open(ctx context.Context, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, parseURLError(o.URL, err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	sessionSettings(cfg)
	if cfg.ConnConfig.Tracer == nil {
		cfg.ConnConfig.Tracer = &dbCounts
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database %s: %w", cfg.ConnConfig.Host, interpretError(err))
	}
	ex := o.EventsExchange
	if ex == "" {
		ex = "mail.events"
	}
	return &Store{pool: pool, eventsExchange: ex, notices: o.Notices, recipientLimit: o.RecipientLimit,
		accountSuppression: o.AccountSuppression, transient: o.Transient, confirm: o.DeliveryConfirm}, nil
}

// IdleInTransactionTimeout is mailsvc's idle_in_transaction_session_timeout:
// a session of the pool that sits inside a transaction for longer, with no
// statement running (a process frozen between two statements, a bug that
// leaks a transaction), is ended by the server, which rolls the
// transaction back and frees its locks and its hold on vacuum. mailsvc
// never waits inside a transaction (a provider call runs between two
// transactions, docs/design.md), so the timeout only fires on such a
// fault; the caller then sees a connection error (transient: the work is
// retried, and pgx's pool replaces the connection). 60 s is far above any
// pause between two statements of one transaction.
const IdleInTransactionTimeout = time.Minute

// sessionSettings sets, once per new connection (AfterConnect), on the
// sessions of a pool that prepares its statements (pgx's default
// cache_statement mode):
//   - plan_cache_mode = force_generic_plan: each statement is then planned
//     once per connection (again after an ANALYZE, see AnalyzeStale)
//     instead of at every execution. PostgreSQL's default picks a custom
//     plan whenever the generic one looks costlier, which for the
//     array-driven hot statements (claims, outcome writes, marks) was
//     every time: measured, planning the outcome write cost 2.9 ms per
//     execution, more than executing it;
//   - idle_in_transaction_session_timeout = IdleInTransactionTimeout, the
//     safety net against a transaction left open.
//
// A pool in another mode (a transaction pooler: simple_protocol, exec,
// describe_exec) sets nothing: a session setting would leak to the
// pooler's other clients (set the timeout on the role there: ALTER ROLE
// ... SET idle_in_transaction_session_timeout = '60s'). The settings are a
// SET, not startup parameters: PgBouncer, which serves prepared statements
// in session mode, refuses a connection whose startup packet carries a
// parameter it does not know. A setting given in the URL is the
// operator's choice and stays.
func sessionSettings(cfg *pgxpool.Config) {
	c := cfg.ConnConfig
	if c.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return
	}
	var sets []string
	for _, p := range []struct{ name, value string }{
		{"plan_cache_mode", "force_generic_plan"},
		{"idle_in_transaction_session_timeout", fmt.Sprintf("%d", IdleInTransactionTimeout.Milliseconds())},
	} {
		if _, set := c.RuntimeParams[p.name]; !set {
			sets = append(sets, "SET "+p.name+" = "+p.value)
		}
	}
	if len(sets) == 0 {
		return
	}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		// One round trip: the simple protocol runs both statements.
		if _, err := conn.PgConn().Exec(ctx, strings.Join(sets, "; ")).ReadAll(); err != nil {
			return fmt.Errorf("session settings (%s): %w", strings.Join(sets, "; "), err)
		}
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}

// Close closes the pool. It waits for acquired connections to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return interpretError(s.pool.Ping(ctx))
}
