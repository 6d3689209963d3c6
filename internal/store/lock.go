package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// relayIdentitySQL names, from the schema that holds table outbox, the
// relay's advisory lock key and its LISTEN channel. Deriving both from the
// schema lets deployments (and parallel tests) that share one database in
// different schemas run one relay each. The channel expression must match
// the trigger function outbox_notify (migrations/00030_outbox_relay.sql).
const relayIdentitySQL = `
SELECT hashtextextended('mailsvc.relay.' || n.nspname, 0),
       'mailsvc_outbox.' || left(n.nspname, 40)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = 'outbox'::regclass`

// RelaySession is the relay's own PostgreSQL connection, outside the pool.
// It holds the session-level advisory lock that makes one relay active
// across all replicas (DESIGN.md section 2), and every outbox read and write
// of the relay runs on it: a relay whose connection dropped (and so lost the
// lock) cannot fetch or mark a row. The lock needs a direct or
// session-pooled connection; a transaction-pooling proxy (PgBouncer
// pool_mode=transaction) would hand the lock to a stranger. Not safe for
// concurrent use.
type RelaySession struct {
	conn    *pgx.Conn
	lockKey int64
	channel string
	held    bool
}

// OpenRelaySession opens a dedicated connection with the pool's settings
// (search_path included) and application_name set to appName. It returns
// an error classified transient (mailtype.ReasonDatabase) when the server
// cannot be reached.
func (s *Store) OpenRelaySession(ctx context.Context, appName string) (*RelaySession, error) {
	conn, err := s.connectDedicated(ctx, appName)
	if err != nil {
		return nil, err
	}
	rs := &RelaySession{conn: conn}
	if err := conn.QueryRow(ctx, relayIdentitySQL).Scan(&rs.lockKey, &rs.channel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("resolve relay lock key: %w", interpretError(err))
	}
	return rs, nil
}

// connectDedicated opens one connection outside the pool.
func (s *Store) connectDedicated(ctx context.Context, appName string) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	if appName != "" {
		cfg.RuntimeParams["application_name"] = appName
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", appName, interpretError(err))
	}
	return conn, nil
}

// TryLock tries, without waiting, to take the relay lock
// (pg_try_advisory_lock). It reports whether this session holds it now.
// Calling it again while holding the lock returns true without stacking a
// second hold. The lock is released when the session closes or its
// connection drops.
func (r *RelaySession) TryLock(ctx context.Context) (bool, error) {
	if r.held {
		return true, nil
	}
	if err := r.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.lockKey).Scan(&r.held); err != nil {
		return false, fmt.Errorf("try relay lock: %w", interpretError(err))
	}
	return r.held, nil
}

// Ping checks that the session's connection, and so its lock, is alive.
func (r *RelaySession) Ping(ctx context.Context) error {
	if err := r.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping relay session: %w", interpretError(err))
	}
	return nil
}

// Close closes the connection, which releases the lock. It waits at most
// 5 s for a graceful close. Safe to call twice.
func (r *RelaySession) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.held = false
	return r.conn.Close(ctx)
}

// OutboxListener waits for the notifications the outbox trigger sends when
// rows are written, on its own connection outside the pool. Not safe for
// concurrent use.
type OutboxListener struct {
	conn *pgx.Conn
}

// ListenOutbox opens a dedicated connection and LISTENs to the outbox
// channel of the schema that holds table outbox. It returns an error
// classified transient when the server cannot be reached.
func (s *Store) ListenOutbox(ctx context.Context, appName string) (*OutboxListener, error) {
	conn, err := s.connectDedicated(ctx, appName)
	if err != nil {
		return nil, err
	}
	var key int64
	var channel string
	if err := conn.QueryRow(ctx, relayIdentitySQL).Scan(&key, &channel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("resolve outbox channel: %w", interpretError(err))
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("listen %s: %w", channel, interpretError(err))
	}
	return &OutboxListener{conn: conn}, nil
}

// Wait blocks until a notification arrives (nil), ctx is done (ctx's
// error) or the connection fails (an error classified transient).
func (l *OutboxListener) Wait(ctx context.Context) error {
	_, err := l.conn.WaitForNotification(ctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("wait for outbox notification: %w", interpretError(err))
}

// Close closes the listener's connection, waiting at most 5 s. Safe to
// call twice.
func (l *OutboxListener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.conn.Close(ctx)
}
