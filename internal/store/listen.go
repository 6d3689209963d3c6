package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// outboxChannelSQL names the LISTEN channel of the schema that holds table
// outbox, so deployments (and parallel tests) that share one database in
// different schemas do not wake each other. It must match the trigger
// function outbox_notify (migrations/00030_outbox_relay.sql).
const outboxChannelSQL = `
SELECT 'mailsvc_outbox.' || left(n.nspname, 40)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = 'outbox'::regclass`

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

// OutboxListener waits for the notifications the outbox trigger sends when
// rows are written, on its own connection outside the pool. LISTEN is
// session state: through a transaction-pooling proxy the notifications go
// to whichever client holds the server connection, so the listener never
// wakes (polling still finds the rows). Not safe for concurrent use.
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
	var channel string
	if err := conn.QueryRow(ctx, outboxChannelSQL).Scan(&channel); err != nil {
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
