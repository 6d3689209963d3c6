package bench

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
// lease kept, no feedback event, no outbox, no template (the floor variant
// adds the templates and the feedback events: see below).
//
// With recordLog the same writes are rows appended to a narrow table,
// mail_send_log (started, sent): the send of mail `started` started, mail
// `sent` was taken (0: none), instead of updates of the wide mail row;
// the mail rows are marked sent per claimed batch, by one UPDATE after the
// batch's last send, which is also that last mail's outcome, committed
// before the worker's next send. A recovery would read the log for the
// rows still `sending`: an outcome logged means sent, a start alone
// possibly sent, neither a silent reclaim. (A real system would also drop
// old log partitions; that cost is not in the figure.) A break-it review
// of the plain version built it to show that the plain version is not a
// lower bound.
//
// The floor (set.render and set.feedback, floor_test.go) is the
// recordLog version with mailsvc's rendered mails and, in the UPDATE that
// marks a batch sent, one EmailSent per mail queued in a narrow table,
// which a relay publishes with confirms: the job done with nothing beyond
// mailsvc's promise and its contract, still without validation, fencing
// tokens, leases, cancels, retries, dead-lettering, the relay's per-order
// ordering and lease, tracing or metrics.

// rawRecordSQL marks the rows of $1 sent and those of $2 started, in one
// statement and one commit. The start mark changes no indexed column, so
// it can be a heap-only update, as mailsvc's is.
const rawRecordSQL = `
WITH sent AS (UPDATE mail SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY ($1))
UPDATE mail SET send_started_at = now() WHERE id = ANY ($2)`

// Statements of the recordLog variant: the table (on the benchmark's own
// schema), and one insert of every waiting worker's (start, outcome).
const (
	rawLogDDL = `CREATE TABLE IF NOT EXISTS mail_send_log (started bigint NOT NULL, sent bigint NOT NULL);
CREATE INDEX IF NOT EXISTS mail_send_log_started_idx ON mail_send_log (started)`
	rawLogSQL = `INSERT INTO mail_send_log (started, sent) SELECT * FROM unnest($2::bigint[], $1::bigint[])`
)

// startRecording creates the log table when recordLog is set and starts
// the group commit.
func (r *rawPipeline) startRecording(ctx context.Context) error {
	if r.set.recordLog {
		if _, err := r.pool.Exec(ctx, rawLogDDL); err != nil {
			return fmt.Errorf("log table: %w", err)
		}
	}
	r.records = make(chan recordRequest, r.set.workers)
	r.wg.Go(func() { r.recordLoop(ctx) })
	return nil
}

// recordRequest is one worker's write: the row it sent (0: none) and the
// row it sends next (0: none); done gets the commit's error.
type recordRequest struct {
	sent, start int64
	done        chan error
}

// sendRecorded sends the rows one by one with send, each after its start
// mark committed together with the previous row's outcome; the last row's
// outcome is a write of its own, or with recordLog the UPDATE that marks
// the whole batch sent (markSent, which with set.feedback also writes the
// batch's events).
func (r *rawPipeline) sendRecorded(ctx context.Context, rows []rawRow, send func(rawRow) error) error {
	var prev int64
	ids := make([]int64, 0, len(rows))
	for _, w := range rows {
		if err := r.record(ctx, prev, w.id); err != nil {
			return err
		}
		if err := send(w); err != nil {
			return err
		}
		prev = w.id
		ids = append(ids, w.id)
	}
	if !r.set.recordLog {
		return r.record(ctx, prev, 0)
	}
	return r.markSent(ctx, ids)
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

// commitRecords writes batch in one statement: the sent and started rows
// updated, or with recordLog one log row per write.
func (r *rawPipeline) commitRecords(ctx context.Context, batch []recordRequest) error {
	sent, start := make([]int64, 0, len(batch)), make([]int64, 0, len(batch))
	for _, q := range batch {
		if r.set.recordLog || q.sent != 0 {
			sent = append(sent, q.sent)
		}
		if r.set.recordLog || q.start != 0 {
			start = append(start, q.start)
		}
	}
	sql := rawRecordSQL
	if r.set.recordLog {
		sql = rawLogSQL
	}
	_, err := r.pool.Exec(ctx, sql, sent, start)
	return err
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
		err := r.commitRecords(ctx, batch)
		if err != nil {
			err = fmt.Errorf("record raw mails: %w", err)
		}
		for _, q := range batch {
			q.done <- err
		}
	}
}
