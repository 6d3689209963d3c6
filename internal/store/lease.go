package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrRelayLeaseLost is returned by the lease-fenced calls of RelayDB when the
// epoch they carry is no longer the current one: another relay took the
// lease, and this one must stop publishing at once.
var ErrRelayLeaseLost = errors.New("relay lease lost: another relay holds it now")

// relayPoolConns is the size of a RelayDB's pool: one connection renews
// the lease while the other publishes.
const relayPoolConns = 2

// RelayDB is the outbox relay's access to the database: a small pool of
// its own, so that renewing the relay lease never queues behind the
// sender's statements. Leadership is a row (table relay_lease), not
// session state: every call is one autocommit statement or one short
// transaction, so it works directly, through PgBouncer in session mode or
// in transaction mode alike. Safe for concurrent use.
type RelayDB struct {
	pool *pgxpool.Pool
}

// OpenRelay returns the relay's pool on the store's settings (search_path
// included) with application_name set to appName. It does not connect: it
// fails only on an invalid configuration. connectTimeout, when positive,
// bounds each connection attempt (a connect through a link that went
// silent must not hold a pool slot for minutes). Close it when done.
func (s *Store) OpenRelay(appName string, connectTimeout time.Duration) (*RelayDB, error) {
	cfg := s.pool.Config().Copy()
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = relayPoolConns, 0, 0
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	if ct := cfg.ConnConfig.ConnectTimeout; connectTimeout > 0 && (ct <= 0 || ct > connectTimeout) {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("open relay pool: %w", err)
	}
	return &RelayDB{pool: pool}, nil
}

// Close closes the pool, waiting for connections in use to be released.
func (r *RelayDB) Close() { r.pool.Close() }

// acquireLeaseSQL takes the lease when it is free: never taken (no row),
// expired on the database's clock, or already held by the same holder (a
// relay taking its own lease back after it stepped down). Each taking
// increments epoch. Two relays racing for an expired lease serialize on
// the row; the second sees the first's fresh expires_at and takes nothing.
const acquireLeaseSQL = `
INSERT INTO relay_lease AS l (holder, epoch, expires_at, acquired_at, renewed_at)
VALUES ($1, 1, now() + $2::bigint * interval '1 millisecond', now(), now())
ON CONFLICT (singleton) DO UPDATE
SET holder = excluded.holder, epoch = l.epoch + 1, expires_at = excluded.expires_at,
    acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at
WHERE l.expires_at <= now() OR l.holder = excluded.holder
RETURNING epoch`

// AcquireLease takes the relay lease for holder, valid for ttl from now on
// the database's clock, if no other holder's lease is current. It returns
// the new epoch (the fencing token of this leadership) and true, or 0 and
// false when another holder has it. holder must be unique to one running
// relay. Errors are classified transient when the database is unreachable.
func (r *RelayDB) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (int64, bool, error) {
	var epoch int64
	err := r.pool.QueryRow(ctx, acquireLeaseSQL, holder, ttl.Milliseconds()).Scan(&epoch)
	switch err := interpretError(err); {
	case errors.Is(err, ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("acquire relay lease: %w", err)
	}
	return epoch, true, nil
}

// renewLeaseSQL extends the lease of one epoch. It succeeds even on an
// expired lease as long as nobody took it since: no other relay can have
// published in between.
const renewLeaseSQL = `
UPDATE relay_lease SET expires_at = now() + $2::bigint * interval '1 millisecond', renewed_at = now()
WHERE singleton AND epoch = $1`

// RenewLease extends the lease of epoch to ttl from now. It returns
// ErrRelayLeaseLost when another relay took the lease since, and an error
// classified transient when the database is unreachable (the caller then
// cannot tell whether it still leads).
func (r *RelayDB) RenewLease(ctx context.Context, epoch int64, ttl time.Duration) error {
	tag, err := r.pool.Exec(ctx, renewLeaseSQL, epoch, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("renew relay lease: %w", interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return ErrRelayLeaseLost
	}
	return nil
}

// ReleaseLease ends the lease of epoch now, so that a standby takes over
// without waiting for it to expire. Releasing a lease already taken by
// another relay changes nothing.
func (r *RelayDB) ReleaseLease(ctx context.Context, epoch int64) error {
	_, err := r.pool.Exec(ctx, `UPDATE relay_lease SET expires_at = now() WHERE singleton AND epoch = $1`, epoch)
	if err != nil {
		return fmt.Errorf("release relay lease: %w", interpretError(err))
	}
	return nil
}

// LeaseHolder describes the current lease, for logs: who holds it and for
// how much longer (negative once expired). ErrNotFound means no relay ever
// took it.
func (r *RelayDB) LeaseHolder(ctx context.Context) (holder string, remaining time.Duration, err error) {
	var ms float64
	err = r.pool.QueryRow(ctx, `SELECT holder, (extract(epoch FROM expires_at - now()) * 1000)::float8 FROM relay_lease`).Scan(&holder, &ms)
	if err != nil {
		return "", 0, fmt.Errorf("read relay lease: %w", interpretError(err))
	}
	return holder, time.Duration(ms * float64(time.Millisecond)), nil
}
