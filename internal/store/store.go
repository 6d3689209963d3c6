// Package store owns all SQL of mailsvc and the pgx connection pool. Every
// state change is one short autocommit statement or one short transaction;
// no transaction is held open across a call to a mail provider or the
// broker. Errors from pgx are classified here (interpretError) so that no
// package above sees pgx.
package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the database handle of mailsvc. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// eventsExchange is written into outbox rows (outbox.exchange).
	eventsExchange string
	// notices renders cancellation notices; nil writes none.
	notices NoticeRenderer
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
}

// Open connects a pool and checks that the database answers. It returns an
// error classified transient (mailtype.ReasonDatabase) when the server
// cannot be reached.
func Open(ctx context.Context, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
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
	return &Store{pool: pool, eventsExchange: ex, notices: o.Notices}, nil
}

// Close closes the pool. It waits for acquired connections to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return interpretError(s.pool.Ping(ctx))
}
