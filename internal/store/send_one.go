package store

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// finishSQL is a group commit's writes in one statement: the fenced
// outcomes (finishManySQL, $1..$13), the outcome events encoded before the
// write from what the writer knows of each row (Attempt.Known; the
// outbox arrays $14..$22 as outboxArgs orders them, then each event's
// mail id, predicted status and predicted sends, $23..$25), and the
// send-started marks of the next sends (markStartedSQL, $26..$29). An
// event is inserted only for a row the write returned with the status and
// sends it was encoded for; the caller builds the others from the
// returned rows (a cancel that came during the send, a write the fence
// refused). The marks' rows are never the outcomes' rows (the caller
// checks), so no row is written twice in the statement.
//
// It returns the outcome rows (kind 0, finishManySQL's columns, then
// whether their event was written) and the marked rows (kind 1, in the
// columns collectStarted reads, the rest blank): UNION ALL of the two.
var finishSQL = `
WITH ` + finishPriorCTE + `, fin (id, token, status, dedupe_key, order_id, template, event_id, sends, revision,
        cancel_requested, cancel_event_id, released_unknown, created_at, trace_context) AS (` + finishUpdateSQL + `
), ob AS (` + renumber(outboxInsertSQL, 13) + `unnest($14::uuid[], $16::text[], $17::text[], $18::text[], $19::text[],
            $20::text[], $21::timestamptz[], $22::text[], $23::bigint[], $24::text[], $25::int[])
        WITH ORDINALITY AS u(e, rk, et, o, k, p, c, tc, mid, st, sends, ord)
    JOIN fin ON fin.id = u.mid AND fin.status = u.st AND fin.sends = u.sends
    LEFT JOIN LATERAL (` + omittedAttachmentsSQL + `) om ON true
    ORDER BY u.ord
    RETURNING dedupe_key
), mk (id, token, budget_sends, sends, ambiguous, left_us) AS (` + renumber(markStartedSQL, 25) + `
)
SELECT 0, fin.id, fin.token, fin.status, fin.dedupe_key, fin.order_id, fin.template, fin.event_id, fin.sends,
    fin.revision, fin.cancel_requested, fin.cancel_event_id, fin.released_unknown, fin.created_at, fin.trace_context,
    ob.dedupe_key IS NOT NULL, 0, 0, 0::bigint
FROM fin LEFT JOIN ob ON ob.dedupe_key = fin.dedupe_key
UNION ALL
SELECT 1, mk.id, mk.token, '', '', '', '', '', mk.sends, 0, false, '', false, 'epoch'::timestamptz, '',
    false, mk.budget_sends, mk.ambiguous, mk.left_us
FROM mk`

// errKnownMissed is finishOne's answer when a row did not match what its
// writer knew of it beyond the status and sends the statement checks: the
// transaction is rolled back and the writes are made again without
// Known (FinishAndStart).
var errKnownMissed = errors.New("an outcome's known row did not match the row written")

// paramRef matches a statement parameter ($n).
var paramRef = regexp.MustCompile(`\$([0-9]+)`)

// renumber shifts every parameter $n of sql to $(n+by), so that a
// statement's text can run as a part of a larger one.
func renumber(sql string, by int) string {
	return paramRef.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:]) // the pattern holds digits only
		return "$" + strconv.Itoa(n+by)
	})
}

// disjoint reports whether no outcome of as is for a row that starts
// marks, the condition for finishSQL.
func disjoint(as []Attempt, starts []Fence) bool {
	ids := make(map[int64]bool, len(as))
	for _, a := range as {
		ids[a.ID] = true
	}
	for _, f := range starts {
		if ids[f.ID] {
			return false
		}
	}
	return true
}

// knownEvents encodes the outcome event each attempt with Known would
// write onto its row as known (eventOf), and returns them with their
// attempt's index.
func knownEvents(as []Attempt) ([]Feedback, []int) {
	var fbs []Feedback
	var idx []int
	for i, a := range as {
		o, k := a.Outcome, a.Known
		if k == nil || o.Release || feedbackType(o.Status) == "" {
			continue
		}
		fbs = append(fbs, eventOf(o, k.row(o)))
		idx = append(idx, i)
	}
	return fbs, idx
}

// row is the row the outcome o is written onto, as k knows it.
func (k *Known) row(o Outcome) finishedRow {
	return finishedRow{status: o.Status, sends: k.Sends, createdAt: k.CreatedAt,
		fb: Feedback{DedupeKey: k.DedupeKey, OrderID: k.OrderID, Template: k.Template, SourceEventID: k.EventID,
			Revision: k.Revision, TraceContext: k.TraceContext}}
}

// sameMail reports whether a and b say the same of the mail besides the
// outcome (the fields a Known predicts).
func sameMail(a, b Feedback) bool {
	return a.DedupeKey == b.DedupeKey && a.OrderID == b.OrderID && a.Template == b.Template &&
		a.SourceEventID == b.SourceEventID && max(a.Revision, 1) == max(b.Revision, 1) && a.TraceContext == b.TraceContext
}

// beginAndFinishOne sends BEGIN and finishSQL in one batch and returns the
// outcome rows by fence, which attempts' events were written, and the
// marked rows. It returns errKnownMissed when a written event's row did
// not match its Known (the caller rolls back).
func (s *Store) beginAndFinishOne(ctx context.Context, c *pgx.Conn, as []Attempt, starts []Fence, lease StartLease) (
	got map[Fence]finishedRow, written []bool, started []Started, err error) {
	fbs, idx := knownEvents(as)
	args := outcomeArgs(as)
	ob, err := s.outboxArgs(fbs)
	if err != nil {
		return nil, nil, nil, err
	}
	mids, sts, sends := make([]int64, len(idx)), make([]string, len(idx)), make([]int32, len(idx))
	for n, i := range idx {
		mids[n], sts[n], sends[n] = as[i].ID, string(as[i].Outcome.Status), int32(as[i].Known.Sends)
	}
	args = append(append(args, ob...), mids, sts, sends)
	args = append(args, markArgs(starts, lease)...)
	got, wrote, started, err := sendFinishOne(ctx, c, args)
	if err != nil {
		return nil, nil, nil, err
	}
	written = make([]bool, len(as))
	for n, i := range idx {
		r, ok := got[as[i].Fence]
		if !ok || !wrote[as[i].Fence] {
			continue
		}
		if !sameMail(r.fb, fbs[n]) {
			return nil, nil, nil, errKnownMissed
		}
		written[i] = true
	}
	return got, written, started, nil
}

// sendFinishOne sends BEGIN and finishSQL with args in one batch and reads
// the rows.
func sendFinishOne(ctx context.Context, c *pgx.Conn, args []any) (
	got map[Fence]finishedRow, wrote map[Fence]bool, started []Started, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(finishSQL, args...)
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, nil, err
	}
	return scanFinishOne(rows)
}

// scanFinishOne reads finishSQL's rows.
func scanFinishOne(rows pgx.Rows) (map[Fence]finishedRow, map[Fence]bool, []Started, error) {
	defer rows.Close()
	got, wrote := make(map[Fence]finishedRow), make(map[Fence]bool)
	var started []Started
	for rows.Next() {
		var kind int32
		var f Fence
		var r finishedRow
		var ok bool
		var st Started
		var leftUS int64
		if err := rows.Scan(&kind, &f.ID, &f.Token, &r.status, &r.fb.DedupeKey, &r.fb.OrderID, &r.fb.Template,
			&r.fb.SourceEventID, &r.sends, &r.fb.Revision, &r.cancelRequested, &r.cancelEventID, &r.releasedUnknown,
			&r.createdAt, &r.fb.TraceContext, &ok, &st.Sends, &st.Ambiguous, &leftUS); err != nil {
			return nil, nil, nil, err
		}
		if kind == 1 {
			st.Fence, st.TotalSends, st.LeaseLeft = f, r.sends, time.Duration(leftUS)*time.Microsecond
			started = append(started, st)
			continue
		}
		got[f], wrote[f] = r, ok
	}
	return got, wrote, started, rows.Err()
}
