package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Started is a claimed row whose send-started mark committed: from now on
// the send may reach the provider, and a crash leaves the row ambiguous.
type Started struct {
	Fence
	// Sends counts the sends of the row that sender.max_attempts bounds,
	// this one included: those since the last `mail reconcile
	// --not-delivered` (mail.sends - mail.budget_base, migration 00200),
	// all of them for a mail never reconciled.
	Sends int
	// TotalSends counts every send of the row, this one included (the
	// attempt number reported in feedback events and traces).
	TotalSends int
	// Ambiguous is how many earlier sends ended ambiguous.
	Ambiguous int
	// LeaseLeft is what was left of the row's lease when the mark's
	// transaction started (locked_until - now(), database clock): the
	// lease ends no earlier than LeaseLeft after any instant the caller
	// took before the call.
	LeaseLeft time.Duration
}

// StartLease is what a send-started mark does with a row's lease.
type StartLease struct {
	// Renew is the lease a mark gives (locked_until = now() + Renew,
	// database clock) when less than Keep of it is left.
	Renew time.Duration
	// Keep is the least lease left that a mark keeps as it is. A mark
	// that keeps the lease changes only columns no index covers
	// (send_started_at, sends), so PostgreSQL can write it as a heap-only
	// (HOT) update: no index entry is added, where a renewal adds one to
	// every index of mail. Keep = Renew renews every lease.
	Keep time.Duration
}

// markStartedSQL sets send_started_at and counts the send of every fenced
// row that is still ours and has no cancel requested, in one statement,
// and renews a lease with less than $4 left to now() + $3 (database
// clock). It leaves updated_at alone, which an index covers: the row's
// last change is still its claim, made moments before.
//
// `m.id = ANY($1)`, with the status compared after a concatenation with
// the empty string, keeps it a scan of the primary key: with a plain `m.status = 'sending'` the
// predicate of mail_sending_lease_idx is implied, and the generic plan
// scanned that whole index (id is its second column) for the ids, a cost
// that grows with the index's dead entries until a vacuum (auto_explain:
// 35 buffers for 3 rows after 800 claims).
const markStartedSQL = `
UPDATE mail m SET send_started_at = now(), sends = m.sends + 1,
    locked_until = CASE WHEN m.locked_until < now() + $4::interval THEN now() + $3::interval ELSE m.locked_until END
FROM unnest($1::bigint[], $2::int[]) AS f(id, token)
WHERE m.id = ANY ($1::bigint[]) AND m.id = f.id AND m.status || '' = 'sending' AND m.attempts = f.token
  AND m.send_started_at IS NULL AND NOT m.cancel_requested
RETURNING m.id, m.attempts, m.sends - m.budget_base, m.sends, m.ambiguous,
    (extract(epoch FROM m.locked_until - now()) * 1000000)::bigint`

// MarkStarted records, in one short autocommit statement, that the sends
// of the claims fs are about to start, and renews their leases as lease
// says (StartLease). A caller hands a mail to the provider only after
// its fence came back here, and only for as long as the lease it reports
// (Started.LeaseLeft) allows. A fence missing from the result must not be
// sent: its lease was lost (another claim owns the row) or a cancel was
// requested meanwhile (the caller releases the row: Outcome Release).
// Errors are classified (a transient *mailtype.Error with ReasonDatabase
// when the database is unreachable); nothing is marked then.
func (s *Store) MarkStarted(ctx context.Context, fs []Fence, lease StartLease) ([]Started, error) {
	started, err := markStarted(ctx, s.pool, fs, lease)
	if err != nil {
		return nil, fmt.Errorf("mark %d sends started: %w", len(fs), interpretError(err))
	}
	return started, nil
}

// markStarted runs markStartedSQL for fs on q.
func markStarted(ctx context.Context, q querier, fs []Fence, lease StartLease) ([]Started, error) {
	rows, err := q.Query(ctx, markStartedSQL, markArgs(fs, lease)...)
	if err != nil {
		return nil, err
	}
	return collectStarted(rows)
}

// markArgs are markStartedSQL's arguments for fs.
func markArgs(fs []Fence, lease StartLease) []any {
	ids := make([]int64, len(fs))
	tokens := make([]int32, len(fs))
	for i, f := range fs {
		ids[i], tokens[i] = f.ID, int32(f.Token)
	}
	return []any{ids, tokens, lease.Renew, lease.Keep}
}

// collectStarted reads markStartedSQL's rows (and closes them).
func collectStarted(rows pgx.Rows) ([]Started, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Started, error) {
		var st Started
		var leftUS int64
		err := r.Scan(&st.ID, &st.Token, &st.Sends, &st.TotalSends, &st.Ambiguous, &leftUS)
		st.LeaseLeft = time.Duration(leftUS) * time.Microsecond
		return st, err
	})
}

// IdempotencyNamespace returns configured when it is not "", else this
// deployment's id: the random UUID migration 00050 stored in mailsvc_meta,
// stable for the life of the database and shared by every replica. It is
// the prefix of provider idempotency keys (mailtype.IdempotencyKey).
func (s *Store) IdempotencyNamespace(ctx context.Context, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	var id string
	err := s.pool.QueryRow(ctx, `SELECT value FROM mailsvc_meta WHERE key = 'deployment_id'`).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read deployment id: %w", interpretError(err))
	}
	return id, nil
}
