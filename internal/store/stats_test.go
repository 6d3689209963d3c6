package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// requireCountsExact checks that Stats reports, for every status, exactly
// the number of rows a full count finds.
func requireCountsExact(t *testing.T, sc *storetest.Schema, step string) {
	t.Helper()
	st, err := sc.Store.Stats(ctx(t))
	require.NoError(t, err, step)
	want := map[mailtype.Status]int64{}
	for _, s := range mailtype.Statuses {
		want[s] = 0
	}
	for status, n := range sc.QueryMap(t, `SELECT status, count(*)::text FROM mail GROUP BY status`) {
		want[mailtype.Status(status)], err = strconv.ParseInt(n, 10, 64)
		require.NoError(t, err)
	}
	require.Equal(t, want, st.Mails, step)
}

// pickStatus picks one of the six statuses per row, varied by $1; 'sending'
// needs a lease (the table's CHECK), so every write below sets locked_until.
const pickStatus = `(ARRAY['pending','sending','sent','failed','cancelled','unknown'])[1 + abs(hashint8(id + $1)) % 6]`

// TestStatusCountersFollowEveryWrite runs random writes of every kind the
// triggers of migration 00100 must follow (multi-row inserts, inserts that
// conflict, updates into, out of and between finished statuses, updates
// that keep the status, deletes, rolled-back writes, folds, a truncate) and
// checks after each one that Stats equals a full count.
func TestStatusCountersFollowEveryWrite(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 14))
	sc := storetest.New(t)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := sc.Store.ExecForTest(ctx(t), q, args...)
		require.NoError(t, err, q)
	}
	next := 0
	insert := func(n int, conflicting bool) {
		statuses := make([]string, n)
		keys := make([]string, n)
		for i := range statuses {
			statuses[i] = string(mailtype.Statuses[rng.IntN(len(mailtype.Statuses))])
			if conflicting && next > 0 && rng.IntN(2) == 0 {
				keys[i] = fmt.Sprintf("k%d", rng.IntN(next))
			} else {
				keys[i] = fmt.Sprintf("k%d", next)
				next++
			}
		}
		exec(`INSERT INTO mail (dedupe_key, order_id, template, status, locked_until)
			SELECT k, k, 'order_confirmed', s, now() FROM unnest($1::text[], $2::text[]) AS u(k, s)
			ON CONFLICT DO NOTHING`, keys, statuses)
	}
	for step := 0; step < 150; step++ {
		var what string
		switch op := rng.IntN(9); op {
		case 0, 1:
			what = "insert"
			insert(1+rng.IntN(30), false)
		case 2:
			what = "insert with conflicts"
			insert(1+rng.IntN(30), true)
		case 3:
			what = "update to one status"
			exec(`UPDATE mail SET status = $1, locked_until = now(), updated_at = now() WHERE id % $2 = $3`,
				string(mailtype.Statuses[rng.IntN(len(mailtype.Statuses))]), 1+rng.IntN(4), rng.IntN(4))
		case 4:
			what = "update to mixed statuses"
			exec(`UPDATE mail SET status = `+pickStatus+`, locked_until = now() WHERE id % $2 = $3`,
				rng.Int64(), 1+rng.IntN(3), rng.IntN(3))
		case 5:
			what = "update keeping the status"
			exec(`UPDATE mail SET updated_at = now() WHERE id % 2 = $1`, rng.IntN(2))
		case 6:
			what = "delete"
			exec(`DELETE FROM mail WHERE id % $1 = $2`, 3+rng.IntN(5), rng.IntN(3))
		case 7:
			what = "rolled back"
			_, err := sc.Store.ExecForTest(ctx(t), `DO $$ BEGIN
				UPDATE mail SET status = 'sent', locked_until = now();
				DELETE FROM mail WHERE id % 2 = 0;
				RAISE EXCEPTION 'roll back';
			END $$`)
			require.ErrorContains(t, err, "roll back")
		case 8:
			what = "fold"
			_, err := sc.Store.CompactStatusCounts(ctx(t))
			require.NoError(t, err)
		}
		requireCountsExact(t, sc, fmt.Sprintf("step %d (%s)", step, what))
	}
	n, err := sc.Store.CompactStatusCounts(ctx(t))
	require.NoError(t, err)
	require.Equal(t, int64(0), sc.QueryInt(t, `SELECT count(*) FROM mail_status_delta`), "a fold empties the deltas (%d folded)", n)
	requireCountsExact(t, sc, "after the last fold")
	exec(`TRUNCATE mail CASCADE`)
	requireCountsExact(t, sc, "after a truncate")
}

// TestStatusCountersUnderConcurrentWritersAndFolds has writers change
// statuses in many short transactions while two folds run in a loop, as
// two replicas' stats collectors do: no write waits for another's counter
// (no error, no deadlock), and the counts are exact at the end.
func TestStatusCountersUnderConcurrentWritersAndFolds(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	sc := storetest.New(t)
	const writers, rows, rounds = 6, 40, 60
	for w := range writers {
		_, err := sc.Store.ExecForTest(ctx(t), `INSERT INTO mail (dedupe_key, order_id, template, status)
			SELECT 'w' || $1 || '-' || g, $1, 'order_confirmed', 'pending' FROM generate_series(1, $2::int) g`, strconv.Itoa(w), rows)
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var folds sync.WaitGroup
	foldErrs := make(chan error, 2)
	for range 2 {
		folds.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := sc.Store.CompactStatusCounts(context.Background()); err != nil {
					foldErrs <- err
					return
				}
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			for range rounds {
				_, err := sc.Store.ExecForTest(context.Background(),
					`UPDATE mail SET status = `+pickStatus+`, locked_until = now() WHERE order_id = $2 AND id % 3 <> $3`,
					rng.Int64(), strconv.Itoa(w), rng.IntN(3))
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	folds.Wait()
	close(errs)
	close(foldErrs)
	for err := range errs {
		require.NoError(t, err)
	}
	for err := range foldErrs {
		require.NoError(t, err)
	}
	requireCountsExact(t, sc, "after concurrent writes and folds")
	_, err := sc.Store.CompactStatusCounts(ctx(t))
	require.NoError(t, err)
	requireCountsExact(t, sc, "after a last fold")
}

// TestStatsQueryReadsNoFinishedRow checks the plan of the stats query on a
// table of finished rows, generic as the store's sessions plan it: the
// mail table is read only through the partial index of rows with work
// left and, for the delivery-unconfirmed mails, through
// mail_unconfirmed_idx, never scanned.
func TestStatsQueryReadsNoFinishedRow(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	require.NoError(t, storetest.Seed(ctx(t), sc.Store, "sent-", mailtype.StatusSent, 20000))
	require.NoError(t, storetest.Seed(ctx(t), sc.Store, "pending-", mailtype.StatusPending, 5))
	sc.Exec(t, `UPDATE mail SET provider = CASE WHEN id % 2 = 0 THEN 'smtp' ELSE 'resend' END,
		delivered_at = CASE WHEN id % 2 = 1 THEN now() END WHERE status = 'sent'`)
	require.NoError(t, storetest.Analyze(ctx(t), sc.Store))
	plan, err := sc.Store.ExplainForTest(ctx(t), store.StatsSQL,
		store.StatsArgs(store.DeliveryConfirm{Providers: []string{"resend"}, After: time.Hour})...)
	require.NoError(t, err)
	require.NotRegexp(t, regexp.MustCompile(`Seq Scan on mail\b`), plan)
	require.Contains(t, plan, "mail_active_idx", plan)
	require.Contains(t, plan, "mail_unconfirmed_idx", plan)
}

// Migration 00100 starts the counters from the rows already there, and its
// down migration restores the index it replaced.
func TestMigration00100CountsExistingRows(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	migrateDownThrough(t, sc, 100)
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'mail_status_%' AND schemaname = current_schema()`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM pg_indexes WHERE indexname = 'mail_status_idx' AND schemaname = current_schema()`))
	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, locked_until)
		SELECT 'k' || g, g::text, 'order_confirmed', (ARRAY['pending','sending','sent','failed','cancelled','unknown'])[1 + g % 6], now()
		FROM generate_series(1, 100) g`)
	_, err := sc.Store.MigrateUp(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"sent": "17", "failed": "17", "cancelled": "17"},
		sc.QueryMap(t, `SELECT status, n::text FROM mail_status_total`))
	requireCountsExact(t, sc, "after migrating up")
	sc.Exec(t, `UPDATE mail SET status = 'sent', sent_at = now() WHERE status = 'unknown'`)
	requireCountsExact(t, sc, "after a write")
}
