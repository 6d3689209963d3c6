package e2e

import (
	"context"
	"fmt"
)

// The baseline with recordEach: the least durable recording mailsvc's
// promise asks of any pipeline, done the plainest way. A worker's mail is
// marked started (committed) before it is handed to the SMTP server, so
// that a crash never lets a silent reclaim send it twice, and its outcome
// is committed before the worker's next send, so that a crash leaves at
// most one accepted mail per worker unrecorded. As in mailsvc, a worker's
// outcome and its next start mark are one write, and the writes of all the
// workers waiting at the same moment share one statement and one commit
// (recordLoop). Nothing else of mailsvc's is done: no fencing token, no
// lease kept, no feedback event, no outbox, no template.

// rawRecordSQL marks the rows of $1 sent and those of $2 started, in one
// statement and one commit. The start mark changes no indexed column, so
// it can be a heap-only update, as mailsvc's is.
const rawRecordSQL = `
WITH sent AS (UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY ($1))
UPDATE mail SET send_started_at = now() WHERE id = ANY ($2)`

// recordRequest is one worker's write: the row it sent (0: none) and the
// row it sends next (0: none); done gets the commit's error.
type recordRequest struct {
	sent, start int64
	done        chan error
}

// sendRecorded sends the rows one by one with send, each after its start
// mark committed together with the previous row's outcome.
func (r *rawPipeline) sendRecorded(ctx context.Context, rows []rawRow, send func(rawRow) error) error {
	var prev int64
	for _, w := range rows {
		if err := r.record(ctx, prev, w.id); err != nil {
			return err
		}
		if err := send(w); err != nil {
			return err
		}
		prev = w.id
	}
	return r.record(ctx, prev, 0)
}

// record hands the write to recordLoop and waits for its commit.
func (r *rawPipeline) record(ctx context.Context, sent, start int64) error {
	q := recordRequest{sent: sent, start: start, done: make(chan error, 1)}
	select {
	case r.records <- q:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordLoop is the group commit: it takes a write, adds every other one
// already waiting, and commits them in one statement.
func (r *rawPipeline) recordLoop(ctx context.Context) {
	for {
		var batch []recordRequest
		select {
		case q := <-r.records:
			batch = append(batch, q)
		case <-ctx.Done():
			return
		}
	fill:
		for {
			select {
			case q := <-r.records:
				batch = append(batch, q)
			default:
				break fill
			}
		}
		sent, start := make([]int64, 0, len(batch)), make([]int64, 0, len(batch))
		for _, q := range batch {
			if q.sent != 0 {
				sent = append(sent, q.sent)
			}
			if q.start != 0 {
				start = append(start, q.start)
			}
		}
		_, err := r.pool.Exec(ctx, rawRecordSQL, sent, start)
		if err != nil {
			err = fmt.Errorf("record raw mails: %w", err)
		}
		for _, q := range batch {
			q.done <- err
		}
	}
}
