package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxRow is one unpublished outbox row as the relay publishes it.
type OutboxRow struct {
	ID         int64
	EventID    string
	Exchange   string
	RoutingKey string
	EventType  string
	// DedupeKey is the key of the mail the event reports ("" if none).
	DedupeKey string
	// Payload is the JSON body.
	Payload   []byte
	CreatedAt time.Time
	// Attempts is the number of failed publish attempts so far.
	Attempts int
	// TraceContext is the stored trace context of the span that wrote the
	// row (tracing.Encode), "" when it has none.
	TraceContext string
}

// OutboxFailure is the outcome of one failed publish of row ID.
type OutboxFailure struct {
	ID int64
	// Error is a sanitized description (mailtype.Sanitize), stored in
	// last_error.
	Error string
	// RetryIn is the delay before the row is due again.
	RetryIn time.Duration
	// MayDie is false for a failure the row did not cause (the broker
	// connection went away, or the broker confirmed nothing in time): the
	// attempt is counted but never makes the row dead, so a broker outage
	// cannot kill the backlog.
	MayDie bool
	// Unroutable marks a publish the broker returned unroutable: the row
	// stops holding back the later rows of its order until a publish of it
	// fails otherwise or succeeds.
	Unroutable bool
}

// OutboxAttempt is a row after RecordOutboxResults counted a failed attempt.
type OutboxAttempt struct {
	ID        int64
	EventID   string
	EventType string
	DedupeKey string
	Attempts  int
	// Dead reports that dead_at was set: the relay gives up on the row.
	Dead bool
}

// fetchOutboxSQL marks the rows $3 published behind the lease fence
// (markPublishedFencedSQL's mark: only while epoch $2 is current, its
// commit not waiting for the WAL flush; the lease row is locked only when
// there is something to mark), then takes due rows oldest first,
// leaving out the rows it marks (the statement's snapshot still sees them
// unpublished), and only for the current, unexpired lease epoch $2: a relay that lost its lease, or whose lease
// ran out on the database's clock, fetches nothing and so publishes
// nothing that the next leader will publish again. A row waits while an earlier
// row of the same order is unpublished and alive (not dead), so one order's
// events go out in write order and a batch holds at most one row per
// order; rows without an order id (NULL or empty) are never held back, and
// neither are the rows behind one whose last publish came back unroutable
// (nobody takes its event type: it must not hold up the ones that are
// taken; migration 00120).
// The OR keeps the probe a correlated subplan on
// outbox_unpublished_order_idx whatever the statistics say: as an anti
// join, on a table that grew from empty before ANALYZE ran, PostgreSQL 15
// scanned the whole index per candidate (415 ms instead of 0.5 ms for 100
// of 20,000 rows).
const fetchOutboxSQL = `
WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS setting),
lease AS MATERIALIZED (
    SELECT epoch FROM relay_lease WHERE singleton AND epoch = $2 AND cardinality($3::bigint[]) > 0 FOR SHARE),
marked AS (
    UPDATE outbox SET published_at = now()
    WHERE id = ANY($3::bigint[]) AND published_at IS NULL AND EXISTS (SELECT 1 FROM lease)
      AND (SELECT setting FROM async) = 'off')
SELECT o.id, o.event_id::text, o.exchange, o.routing_key, o.event_type, coalesce(o.dedupe_key, ''),
       o.payload::text, o.created_at, o.attempts, coalesce(o.trace_context, '')
FROM outbox o
WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= now() AND o.id <> ALL($3::bigint[])
  AND EXISTS (SELECT 1 FROM relay_lease l WHERE l.singleton AND l.epoch = $2 AND l.expires_at > now())
  AND (coalesce(o.order_id, '') = '' OR NOT EXISTS (
      SELECT 1 FROM outbox p
      WHERE p.order_id = o.order_id AND p.id < o.id
        AND p.published_at IS NULL AND p.dead_at IS NULL AND NOT p.unroutable AND p.id <> ALL($3::bigint[])))
ORDER BY o.id
LIMIT $1`

// FetchOutbox marks the rows of published published (the previous round's
// rows the broker acked, whose mark the relay deferred to this fetch),
// then returns at most limit due, unpublished, live rows, oldest first, at
// most one per order (see fetchOutboxSQL), in one autocommit statement:
// a round of the relay costs one statement, where a fetch and a mark were
// two. Both happen only while epoch holds the lease: the mark under the
// lease row's lock (a relay that took the lease over waits for the
// commit, and once it has taken it nothing is marked: it publishes those
// rows again, which at-least-once allows); the fetch only while the lease
// has not expired on the database's clock, otherwise it returns none (the
// lease keeper finds out why). The mark commits without waiting for the
// WAL flush, as markPublishedFencedSQL's. Errors are classified transient
// (mailtype.ReasonDatabase) when the connection failed, and then nothing
// was marked.
func (r *RelayDB) FetchOutbox(ctx context.Context, epoch int64, limit int, published []int64) ([]OutboxRow, error) {
	if published == nil {
		published = []int64{}
	}
	rows, err := r.pool.Query(ctx, fetchOutboxSQL, limit, epoch, published)
	if err != nil {
		return nil, fmt.Errorf("fetch outbox: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		var payload string
		err := row.Scan(&o.ID, &o.EventID, &o.Exchange, &o.RoutingKey, &o.EventType, &o.DedupeKey, &payload, &o.CreatedAt,
			&o.Attempts, &o.TraceContext)
		o.Payload = []byte(payload)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("fetch outbox: %w", interpretError(err))
	}
	return out, nil
}

// leaseFenceSQL locks the lease row of one epoch until the transaction
// ends: a relay taking the lease over waits for the commit, and once it has
// taken it this finds no row.
const leaseFenceSQL = `SELECT epoch FROM relay_lease WHERE singleton AND epoch = $1 FOR SHARE`

const markPublishedSQL = `
UPDATE outbox SET published_at = now()
WHERE id = ANY($1) AND published_at IS NULL`

// markPublishedFencedSQL is markPublishedSQL behind the lease fence in one
// autocommit statement: it marks the rows $2 only while epoch $1 is
// current, and says whether it was.
//
// Its commit does not wait for the WAL flush (synchronous_commit off for
// this statement's own transaction alone, set_config's is_local; the
// last column reports the setting it committed under): the broker has
// confirmed the events already, so a mark that a PostgreSQL crash loses
// within the WAL writer's delay only publishes those events again, which
// at-least-once delivery allows and consumers dedupe by event_id
// (docs/design.md, "The outbox relay lease"). The lease's own writes keep
// waiting for the flush: the fencing token must never go back.
const markPublishedFencedSQL = `
WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS setting),
lease AS MATERIALIZED (` + leaseFenceSQL + `),
marked AS (
    UPDATE outbox SET published_at = now()
    WHERE id = ANY($2) AND published_at IS NULL AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM lease), (SELECT count(*) FROM marked), (SELECT setting FROM async)`

// markFailedSQL counts one failed attempt per row; the row dies when the
// attempt reaches maxAttempts and the failure was the row's own.
const markFailedSQL = `
UPDATE outbox o SET
    attempts = o.attempts + 1,
    last_error = f.err,
    next_attempt_at = now() + f.delay_ms * interval '1 millisecond',
    dead_at = CASE WHEN o.attempts + 1 >= $5 AND f.may_die THEN now() END,
    unroutable = f.unroutable
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[], $6::bool[]) AS f(id, err, delay_ms, may_die, unroutable)
WHERE o.id = f.id AND o.published_at IS NULL AND o.dead_at IS NULL
RETURNING o.id, o.event_id::text, o.event_type, coalesce(o.dedupe_key, ''), o.attempts, o.dead_at IS NOT NULL`

// RecordOutboxResults marks the rows in published as published (only rows
// whose publish the broker acked belong there) and counts a failed attempt
// for each failure, setting dead_at once a row's attempts reach
// maxAttempts. It writes only while epoch is the current lease epoch,
// checked under a lock on the lease row in the same statement or
// transaction, and returns ErrRelayLeaseLost (writing nothing) once another
// relay took the lease. Both writes commit together in one short
// transaction, run after the confirms (never while waiting on the broker).
// It returns the failed rows after the update; rows already published are
// left alone. Errors are classified transient when the connection failed,
// and then nothing was written.
func (r *RelayDB) RecordOutboxResults(ctx context.Context, epoch int64, published []int64, failed []OutboxFailure, maxAttempts int) ([]OutboxAttempt, error) {
	if len(failed) == 0 {
		if len(published) == 0 {
			return nil, nil
		}
		return nil, r.markPublished(ctx, epoch, published)
	}
	var attempts []OutboxAttempt
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, leaseFenceSQL, epoch).Scan(&epoch); errors.Is(err, pgx.ErrNoRows) {
			return ErrRelayLeaseLost
		} else if err != nil {
			return fmt.Errorf("check relay lease: %w", err)
		}
		if len(published) > 0 {
			if _, err := tx.Exec(ctx, markPublishedSQL, published); err != nil {
				return fmt.Errorf("mark outbox published: %w", err)
			}
		}
		var err error
		attempts, err = markFailed(ctx, tx, failed, maxAttempts)
		return err
	})
	if errors.Is(err, ErrRelayLeaseLost) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("record outbox results: %w", interpretError(err))
	}
	return attempts, nil
}

// markPublished is the common case of RecordOutboxResults: one autocommit
// statement, one round trip.
func (r *RelayDB) markPublished(ctx context.Context, epoch int64, published []int64) error {
	var held bool
	var marked int64
	var commit string
	if err := r.pool.QueryRow(ctx, markPublishedFencedSQL, epoch, published).Scan(&held, &marked, &commit); err != nil {
		return fmt.Errorf("mark outbox published: %w", interpretError(err))
	}
	if !held {
		return ErrRelayLeaseLost
	}
	return nil
}

func markFailed(ctx context.Context, tx pgx.Tx, failed []OutboxFailure, maxAttempts int) ([]OutboxAttempt, error) {
	n := len(failed)
	ids, errs, delays, mayDie := make([]int64, n), make([]string, n), make([]int64, n), make([]bool, n)
	unroutable := make([]bool, n)
	for i, f := range failed {
		ids[i], errs[i], delays[i], mayDie[i], unroutable[i] = f.ID, f.Error, f.RetryIn.Milliseconds(), f.MayDie, f.Unroutable
	}
	rows, err := tx.Query(ctx, markFailedSQL, ids, errs, delays, mayDie, maxAttempts, unroutable)
	if err != nil {
		return nil, fmt.Errorf("mark outbox failed: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxAttempt, error) {
		var a OutboxAttempt
		err := row.Scan(&a.ID, &a.EventID, &a.EventType, &a.DedupeKey, &a.Attempts, &a.Dead)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("mark outbox failed: %w", err)
	}
	return out, nil
}

const deletePublishedSQL = `
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE published_at < $1 ORDER BY published_at LIMIT $2)`

// DeletePublishedOutbox deletes at most limit rows published before
// before, oldest first, and returns how many it deleted. Unpublished and
// dead rows are never deleted. Call it again while it returns limit.
func (r *RelayDB) DeletePublishedOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := r.pool.Exec(ctx, deletePublishedSQL, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows: %w", interpretError(err))
	}
	return tag.RowsAffected(), nil
}
