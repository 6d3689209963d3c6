// Package store owns all SQL of mailsvc and the pgx connection pool. Every
// state change is one short autocommit statement or one short transaction;
// no transaction is held open across a call to a mail provider or the
// broker. Errors from pgx are classified here (interpretError) so that no
// package above sees pgx.
package store

import (
	"context"
	"fmt"

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
	preferGenericPlans(cfg)
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

// preferGenericPlans sets plan_cache_mode = force_generic_plan on the
// sessions of a pool that prepares its statements (pgx's default
// cache_statement mode): each statement is then planned once per
// connection (again after an ANALYZE, see AnalyzeStale) instead of at
// every execution. PostgreSQL's default picks a custom plan whenever the
// generic one looks costlier, which for the array-driven hot statements
// (claims, outcome writes, marks) was every time: measured, planning the
// outcome write cost 2.9 ms per execution, more than executing it. A pool
// in another mode (a transaction pooler: simple_protocol, exec,
// describe_exec) prepares nothing, so nothing is set there: a session
// setting would leak to the pooler's other clients. The setting is a SET
// once per new connection (AfterConnect), not a startup parameter:
// PgBouncer, which serves prepared statements in session mode, refuses a
// connection whose startup packet carries a parameter it does not know.
// A plan_cache_mode in the URL is the operator's choice and stays.
func preferGenericPlans(cfg *pgxpool.Config) {
	c := cfg.ConnConfig
	if c.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return
	}
	if _, set := c.RuntimeParams["plan_cache_mode"]; set {
		return
	}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			return fmt.Errorf("set plan_cache_mode: %w", err)
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
