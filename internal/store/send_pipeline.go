package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// rollbackTimeout bounds the ROLLBACK after a failed pipelined transaction.
const rollbackTimeout = 5 * time.Second

// finishPipelined is FinishAndStart's transaction on c in two round trips
// where pgx.BeginFunc took five (BEGIN, outcomes, outbox, marks, COMMIT):
// BEGIN and one statement go in one pipelined batch, COMMIT in the
// second. The statement (finishSQL) writes the fenced outcomes, the
// outcome events the writer could encode before the write
// (Attempt.Known) and the send-started marks; the second batch adds the
// events built from the rows the write returned (the rest) before COMMIT.
// When a mark is for a row with an outcome in the same call, the outcomes
// go alone in the first batch (finishManySQL) and the marks in the
// second. A cancellation
// notice (rare: a cancel that came too late) takes its own round trips in
// between. Within a batch the server skips every statement after a failed
// one, so COMMIT never runs after an error; the transaction left open is
// rolled back (or, when that fails too, the pool discards the connection,
// which is still in a transaction). A statement error commits nothing.
// A connection that breaks (or a context that ends) while the second batch
// is on its way may leave the COMMIT run by the server although an error
// is returned, a wider window than a lone COMMIT's lost reply: the
// caller's retry is safe, since every write is fenced, and finds the rows
// no longer sending (ErrLeaseLost; the janitor and the outbox already have
// the committed outcome). Sending COMMIT alone closes the window at about
// 14% more server CPU per call (measured), which this path exists to save.
func (s *Store) finishPipelined(ctx context.Context, c *pgx.Conn, as []Attempt, res []AttemptResult,
	starts []Fence, lease StartLease) (started []Started, err error) {
	defer func() {
		if err != nil && c.PgConn().TxStatus() != 'I' && !c.IsClosed() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			_, _ = c.Exec(rctx, "ROLLBACK")
		}
	}()
	marked := len(starts) == 0
	var got map[Fence]finishedRow
	written := make([]bool, len(as))
	if disjoint(as, starts) {
		got, written, started, err = s.beginAndFinishOne(ctx, c, as, starts, lease)
		marked = true
	} else {
		got, err = beginAndFinish(ctx, c, as)
	}
	if err != nil {
		return nil, err
	}
	fbs, notices := applyFinished(as, got, res, written)
	if err := suppressRefused(ctx, c, as, res); err != nil {
		return nil, err
	}
	for _, n := range notices {
		if _, err := s.insertNotice(ctx, c, n.key, n.traceContext); err != nil {
			return nil, err
		}
	}
	b := &pgx.Batch{}
	if len(fbs) > 0 {
		args, err := s.outboxArgs(fbs)
		if err != nil {
			return nil, err
		}
		b.Queue(insertOutboxManySQL, args...)
	}
	if !marked {
		b.Queue(markStartedSQL, markArgs(starts, lease)...)
	}
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	more, err := readOutboxMarksCommit(br, len(fbs) > 0, !marked)
	if !marked {
		started = more
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return started, err
}

// beginAndFinish sends BEGIN and finishManySQL for as in one batch and
// returns the rows the writes returned, by fence.
func beginAndFinish(ctx context.Context, c *pgx.Conn, as []Attempt) (got map[Fence]finishedRow, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(finishManySQL, outcomeArgs(as)...)
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return scanFinished(rows)
}

// readOutboxMarksCommit reads the second batch's results in order: the
// outbox insert (when queued), the marks (when queued), then COMMIT.
func readOutboxMarksCommit(br pgx.BatchResults, outbox, marks bool) ([]Started, error) {
	if outbox {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	var started []Started
	if marks {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		if started, err = collectStarted(rows); err != nil {
			return nil, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, err
	}
	if tag.String() != "COMMIT" {
		// A transaction that failed unseen answers COMMIT with ROLLBACK.
		return nil, fmt.Errorf("commit answered %q: nothing was committed", tag.String())
	}
	return started, nil
}
