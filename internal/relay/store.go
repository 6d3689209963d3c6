package relay

import (
	"context"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"
)

// Store is what the relay needs of the store: its own small pool for the
// lease and the outbox (OpenRelay), and a dedicated connection for the
// outbox's wake-ups (ListenOutbox). *store.Store implements it; app wires
// it.
type Store interface {
	// OpenRelay opens the relay's pool; appName is the application_name of
	// its connections, connectTimeout bounds each connect.
	OpenRelay(appName string, connectTimeout time.Duration) (*store.RelayDB, error)
	// ListenOutbox LISTENs to the outbox channel on a connection of its own.
	ListenOutbox(ctx context.Context, appName string) (*store.OutboxListener, error)
}

// DB is what the relay does on the pool that Store.OpenRelay opens: the
// lease (take, renew, release, read its holder) and the outbox (fetch due
// rows, record a round's results, delete published rows past retention),
// every write fenced by the lease epoch. *store.RelayDB implements it.
type DB interface {
	AcquireLease(ctx context.Context, holder string, ttl time.Duration) (epoch int64, ok bool, err error)
	RenewLease(ctx context.Context, epoch int64, ttl time.Duration) error
	ReleaseLease(ctx context.Context, epoch int64) error
	LeaseHolder(ctx context.Context) (holder string, remaining time.Duration, err error)
	FetchOutbox(ctx context.Context, epoch int64, limit int, published []int64) ([]store.OutboxRow, error)
	RecordOutboxResults(ctx context.Context, epoch int64, published []int64, failed []store.OutboxFailure, maxAttempts int) ([]store.OutboxAttempt, error)
	DeletePublishedOutbox(ctx context.Context, before time.Time, limit int) (int64, error)
	Close()
}

var (
	_ Store = (*store.Store)(nil)
	_ DB    = (*store.RelayDB)(nil)
)
