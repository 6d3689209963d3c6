package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// ids lists the ids of entries.
func ids(es []store.OutboxEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// Five rows: dead (2 of them), waiting out a retry, fresh, published.
// list shows the unpublished ones (or the dead ones), replay --dead
// revives dead rows with a fresh count of attempts, replay makes the
// waiting row due now; neither touches any other row, and a second replay
// finds nothing.
func TestOutboxListAndReplay(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	ctx := testCtx(t)
	require.NoError(t, storetest.InsertOutbox(ctx, b.sc.Store, feedback("1"), feedback("2"), feedback("3"), feedback("4"), feedback("5")))
	rows := b.rowIDs(t, "1")
	dead1, dead2, waiting, fresh, published := rows[0], b.rowIDs(t, "2")[0], b.rowIDs(t, "3")[0], b.rowIDs(t, "4")[0], b.rowIDs(t, "5")[0]
	b.sc.Exec(t, `UPDATE outbox SET dead_at = now(), attempts = 10, last_error = 'unroutable: no queue' WHERE id = ANY($1)`, []int64{dead1, dead2})
	b.sc.Exec(t, `UPDATE outbox SET attempts = 2, next_attempt_at = now() + interval '1 hour', last_error = 'nack: x' WHERE id = $1`, waiting)
	b.sc.Exec(t, `UPDATE outbox SET published_at = now() WHERE id = $1`, published)

	all, err := b.sc.Store.ListOutbox(ctx, false, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{dead1, dead2, waiting, fresh}, ids(all))
	require.NotNil(t, all[0].DeadAt)
	require.Equal(t, "unroutable: no queue", all[0].LastError)
	require.Equal(t, "order-confirmed:1", all[0].DedupeKey)
	require.Equal(t, "EmailSent", all[0].EventType)
	require.Nil(t, all[2].DeadAt)
	deadOnly, err := b.sc.Store.ListOutbox(ctx, true, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{dead1, dead2}, ids(deadOnly))
	limited, err := b.sc.Store.ListOutbox(ctx, false, 3)
	require.NoError(t, err)
	require.Len(t, limited, 3)

	revived, err := b.sc.Store.ReplayOutbox(ctx, true, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{dead1}, ids(revived), "--limit 1, oldest first")
	require.Nil(t, revived[0].DeadAt)
	require.Zero(t, revived[0].Attempts)
	revived, err = b.sc.Store.ReplayOutbox(ctx, true, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{dead2}, ids(revived))
	require.EqualValues(t, 0, b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL`))
	require.EqualValues(t, 2, b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE id = ANY($1) AND next_attempt_at <= now()`, []int64{dead1, dead2}))

	due, err := b.sc.Store.ReplayOutbox(ctx, false, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{waiting}, ids(due), "only the row that waited out a backoff")
	require.Equal(t, 2, due[0].Attempts, "its attempts stay counted")
	again, err := b.sc.Store.ReplayOutbox(ctx, false, 0)
	require.NoError(t, err)
	require.Empty(t, again)
	again, err = b.sc.Store.ReplayOutbox(ctx, true, 0)
	require.NoError(t, err)
	require.Empty(t, again)
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND id = $1`, published))

	// The relay fetches the revived and the due rows now.
	got := fetchIDs(t, b.sess, 10)
	require.Equal(t, []int64{dead1, dead2, waiting, fresh}, got)
}
