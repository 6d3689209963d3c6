package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// pipelineCase is one FinishAndStart: the outcome of order 1's send (sent:
// a terminal transition, so an outbox row) and the send-started mark of
// order 2, both claimed and order 1 marked started.
type pipelineCase struct {
	as     []store.Attempt
	starts []store.Fence
}

func setupPipeline(t *testing.T, sc *storetest.Schema) pipelineCase {
	t.Helper()
	ctx := testCtx(t)
	outcomesOf(t, sc.Store, modeConfirm("1"), modeConfirm("2"))
	got, err := sc.Store.ClaimMails(ctx, store.ClaimParams{Limit: 2, Lease: time.Minute, Worker: "w"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	byOrder := map[string]store.ClaimedMail{}
	for _, m := range got {
		byOrder[m.OrderID] = m
	}
	started, err := sc.Store.MarkStarted(ctx, []store.Fence{byOrder["1"].Fence}, store.StartLease{Renew: time.Minute, Keep: time.Minute})
	require.NoError(t, err)
	require.Len(t, started, 1)
	one := byOrder["1"]
	return pipelineCase{
		as: []store.Attempt{{Fence: one.Fence, Outcome: store.Outcome{Status: mailtype.StatusSent, Provider: "smtp",
			ProviderMessageID: "pm-1"}, Known: one.Known(started[0])}},
		starts: []store.Fence{byOrder["2"].Fence},
	}
}

// requireNothingCommitted checks that a FinishAndStart of setupPipeline's
// case left every row as it was: order 1 still sending, order 2 not
// started, no outbox row.
func requireNothingCommitted(t *testing.T, sc *storetest.Schema) {
	t.Helper()
	require.Equal(t, map[string]string{"1": "sending", "2": "sending"}, sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '2' AND (sends > 0 OR send_started_at IS NOT NULL)`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

// requireCommitted checks that setupPipeline's case was written once.
func requireCommitted(t *testing.T, sc *storetest.Schema) {
	t.Helper()
	require.Equal(t, map[string]string{"1": "sent", "2": "sending"}, sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '2' AND sends = 1 AND send_started_at IS NOT NULL`))
	requireFeedback(t, sc, map[string]string{"1": "EmailSent"})
}

// TestFinishAndStartOutboxFailureCommitsNothing: when the second batch
// fails (the outbox insert, here refused by a trigger), the outcome
// writes of the first batch are not committed, and the pooled connection,
// the only one, is back out of the aborted transaction: the same call
// succeeds on it once the fault is gone. In every exec mode.
func TestFinishAndStartOutboxFailureCommitsNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			c := setupPipeline(t, sc)
			ctx := testCtx(t)
			st, err := store.Open(ctx, store.Options{URL: storetest.WithParam(sc.URL, "default_query_exec_mode", mode), MaxConns: 1})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			sc.Exec(t, `CREATE FUNCTION refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'outbox refused'; END $$`)
			sc.Exec(t, `CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_outbox()`)

			_, _, err = st.FinishAndStart(ctx, c.as, c.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
			require.ErrorContains(t, err, "outbox refused")
			requireNothingCommitted(t, sc)

			sc.Exec(t, `DROP TRIGGER refuse_outbox ON outbox`)
			res, started, err := st.FinishAndStart(ctx, c.as, c.starts, store.StartLease{Renew: time.Minute, Keep: time.Minute})
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.NoError(t, res[0].Err)
			require.Equal(t, mailtype.StatusSent, res[0].Status)
			require.Len(t, started, 1)
			require.Equal(t, c.starts[0], started[0].Fence)
			requireCommitted(t, sc)
		})
	}
}
