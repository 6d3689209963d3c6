package e2e

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
)

// fault is one kill, pause or vanished host of a replica, with the mails
// whose send the replica had started and not recorded at that instant:
// the only mails the fault may duplicate or leave unknown.
//
// Attribution: a worker commits a send-started mark (send_started_at set,
// locked_by its own hostname/pid) before it hands a mail to the provider,
// and the row leaves that state only when the worker records the outcome
// (status changes, or a release clears the mark) or when the janitor
// handles the expired lease (locked_by becomes store.GraceHolder, then a
// verdict). So the rows in `sending` with send_started_at set whose claim
// belongs to the process's worker id, read from the database right after
// the signal (and again a moment later, for a mark that was on its way),
// are exactly the sends that were on the wire or accepted and unrecorded
// when the process died or froze. A row that the janitor had already put
// in grace is attributed to its claimer through ownerLog.
type fault struct {
	kind     string // SIGKILL, SIGSTOP or vanish
	proc     int
	worker   string
	at       time.Time
	inflight map[string]bool // dedupe keys, every capture's
	// last is the latest capture alone: a worker's outcome and its next
	// mark commit together, so a capture before and one after that commit
	// see two rows of one worker; the latest (taken once every commit the
	// dead process had in flight landed) is the set it left behind.
	last map[string]bool
	// dups are the duplicate deliveries attributed to the fault.
	dups int
}

func (r *chaosRig) newFault(kind string, i int) *fault {
	f := &fault{kind: kind, proc: i, worker: r.worker(i), at: time.Now(), inflight: map[string]bool{}}
	r.faults = append(r.faults, f)
	r.counts[kind]++
	return f
}

// capture adds to f the rows started and unrecorded by f's worker now.
func (r *chaosRig) capture(f *fault) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := r.owners.read(ctx)
	require.NoError(r.t, err, "read started sends")
	f.last = map[string]bool{}
	for _, row := range rows {
		if r.owners.ownerOf(row) == f.worker {
			f.inflight[row.key] = true
			f.last[row.key] = true
		}
	}
}

// startedRow is a `sending` row whose send started.
type startedRow struct {
	fence    store.Fence
	key      string
	lockedBy string
}

// ownerLog remembers, by claim (row id and fencing token), the worker that
// claimed each started send, so that a send the janitor put in grace is
// still attributed to its process. It reads the started sends every 200
// ms: a claim is graced only after its lease (12 s) expired, so every
// graced claim was seen with its owner first.
type ownerLog struct {
	pool  *pgxpool.Pool
	mu    sync.Mutex
	owner map[store.Fence]string
}

func (r *chaosRig) startOwnerLog() {
	pool, err := pgxpool.New(context.Background(), r.s.Schema.URL)
	require.NoError(r.t, err)
	r.owners = &ownerLog{pool: pool, owner: map[store.Fence]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = r.owners.read(rctx) // a failed read is retried at the next tick
				rcancel()
			}
		}
	}()
	r.t.Cleanup(func() {
		cancel()
		<-done
		pool.Close()
	})
}

const startedSQL = `
SELECT id, attempts, dedupe_key, COALESCE(locked_by, '') FROM mail
WHERE status = 'sending' AND send_started_at IS NOT NULL`

// read returns the started sends and logs the owner of each claim.
func (o *ownerLog) read(ctx context.Context) ([]startedRow, error) {
	rows, err := o.pool.Query(ctx, startedSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []startedRow
	for rows.Next() {
		var s startedRow
		if err := rows.Scan(&s.fence.ID, &s.fence.Token, &s.key, &s.lockedBy); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range out {
		if s.lockedBy != store.GraceHolder {
			o.owner[s.fence] = s.lockedBy
		}
	}
	return out, nil
}

// ownerOf is the worker that claimed row ("" when unknown).
func (o *ownerLog) ownerOf(row startedRow) string {
	if row.lockedBy != store.GraceHolder {
		return row.lockedBy
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner[row.fence]
}

// keys returns the set's members, sorted.
func keys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
