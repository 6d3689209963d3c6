package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

// dbTimeout bounds each database statement (or short transaction) of a
// round, so that a database link gone silent cannot hold a round forever.
const dbTimeout = 10 * time.Second

// dbError marks an error of the relay's database access: the publish loop
// backs off and retries the round, whereas a broker error reconnects the
// broker.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

// maxRetentionDeletes bounds the DELETE statements of one retention pass,
// so that a large first cleanup does not hold up publishing.
const maxRetentionDeletes = 10

// publishLoop publishes rounds on pub until ctx is done (nil), the broker
// fails, or the lease turns out lost (store.ErrRelayLeaseLost). Rounds run
// under rctx, so a soft stop lets the round in flight finish; a round that
// fails on the database is retried after a capped, jittered backoff.
func (r *Relay) publishLoop(ctx, rctx context.Context, pub *broker.Publisher, db DB, epoch int64) error {
	if err := r.declare(pub); err != nil {
		return err
	}
	m := &marks{db: db, epoch: epoch}
	defer r.flushMarks(rctx, m)
	nextRetention := time.Now()
	failures := 0
	for ctx.Err() == nil {
		if pub.IsClosed() {
			if err := pub.Reopen(); err != nil {
				return err
			}
		}
		full, err := r.round(rctx, pub, m)
		if err == nil && !time.Now().Before(nextRetention) {
			err = r.retain(rctx, db)
			nextRetention = time.Now().Add(r.cfg.RetentionInterval)
		}
		var de *dbError
		switch {
		case errors.Is(err, store.ErrRelayLeaseLost) || (err != nil && !errors.As(err, &de)):
			return err
		case err != nil:
			failures++
			d := backoff.Delay(failures, r.cfg.ReconnectBackoff, r.cfg.ReconnectBackoffMax)
			r.log.Warn("outbox round failed on the database, retrying", "error", err, "retry_in", d.String(), "failures", failures)
			backoff.Sleep(ctx.Done(), d)
			continue
		}
		failures = 0
		if !full {
			r.idle(ctx, pub, m)
		}
	}
	return nil
}

// markLinger is how long the relay holds a round's published marks for
// the next round's fetch, which writes them in its own statement
// (store.RelayDB.FetchOutbox): at a steady rate the next round starts
// within it, and a round costs one statement where it cost two. An idle
// relay writes them alone once it ended, and the publish loop writes them
// when it ends, so a mark is late by about this much at most. It is twice
// linger, so that the next round of a steady stream (a wake-up, then
// linger) comes within it. A relay that dies meanwhile leaves those rows
// to be published again by the next leader, which at-least-once delivery
// allows (consumers dedupe by event_id).
const markLinger = 100 * time.Millisecond

// marks are the rows of a leadership's last round that the broker acked
// and that are not marked published yet (owed), with the round's rows,
// counted as published once their marks are written, and when the broker
// acked them.
type marks struct {
	db    DB
	epoch int64
	owed  []int64
	rows  []store.OutboxRow
	acked time.Time
}

// owe defers the marks of rows, all acked at acked.
func (m *marks) owe(published []int64, rows []store.OutboxRow, acked time.Time) {
	m.owed, m.rows, m.acked = published, rows, acked
}

// written reports the rows whose marks were written (the metrics count
// them now, as published) and forgets them.
func (r *Relay) written(m *marks) {
	if len(m.rows) > 0 {
		r.report(m.rows, make([]error, len(m.rows)), nil, m.acked)
		r.log.Debug("outbox round", "rows", len(m.rows), "published", len(m.rows), "failed", 0)
	}
	m.owed, m.rows = nil, nil
}

// flushMarks writes the owed marks alone (a short statement bounded by
// dbTimeout, even once ctx ended). A failure keeps them owed for the next
// fetch, unless the lease was lost: the next leader publishes them again.
func (r *Relay) flushMarks(ctx context.Context, m *marks) {
	if len(m.owed) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	_, err := m.db.RecordOutboxResults(wctx, m.epoch, m.owed, nil, r.cfg.MaxAttempts)
	switch {
	case err == nil:
		r.written(m)
	case errors.Is(err, store.ErrRelayLeaseLost):
		m.owed, m.rows = nil, nil
	default:
		r.log.Warn("mark published outbox rows: retrying with the next fetch", "rows", len(m.owed), "error", err)
	}
}

// declare declares the events exchange (and queue) when configured.
func (r *Relay) declare(pub *broker.Publisher) error {
	if !r.cfg.DeclareExchange {
		return nil
	}
	if err := pub.DeclareExchange(r.cfg.Exchange, "topic"); err != nil {
		return err
	}
	if r.cfg.EventsQueue != "" {
		return pub.DeclareBoundQueue(r.cfg.EventsQueue, r.cfg.Exchange, "#")
	}
	return nil
}

// linger is how long the relay waits after a wake-up before it fetches,
// so that the outbox rows of the commits that follow within it go out in
// the same round: under load each commit (a group of a few outcomes) woke
// a round of its own, a statement and a confirm wait for about three
// rows. It delays feedback events by as much, never a mail. 50 ms: at 200
// events/s a round takes about ten rows, 0.09 relay statements a mail
// where 20 ms took 0.25 and 5 ms 0.5 (docs/benchmarks.md, "Where the
// statements go"); a full round (relay.batch_size rows) is followed at
// once by the next, so the wait never caps the relay's rate.
const linger = 50 * time.Millisecond

// idle waits for a wake-up (then linger more), the poll interval, the
// channel closing or ctx. With marks owed, it waits markLinger for a
// wake-up first (the next fetch writes them), then writes them alone.
func (r *Relay) idle(ctx context.Context, pub *broker.Publisher, m *marks) {
	if len(m.owed) > 0 {
		t := time.NewTimer(markLinger)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.wake:
			t.Stop()
			backoff.Sleep(ctx.Done(), linger)
			return
		case <-pub.Closed():
			t.Stop()
			return
		case <-t.C:
		}
		r.flushMarks(ctx, m)
	}
	t := time.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
		backoff.Sleep(ctx.Done(), linger)
	case <-t.C:
	case <-pub.Closed():
	}
}

// coveredWake drops a wake-up that is pending when a round starts: every
// wake-up is sent after its commit (the in-process Wake after the outcome's
// transaction, a NOTIFY on delivery of the commit), so the fetch that
// follows sees its rows. Each outbox write wakes the relay twice, in
// process and by NOTIFY; at a low rate the second one arrived during the
// round and started a round of its own that found nothing, one fetch per
// event for nothing.
func (r *Relay) coveredWake() {
	select {
	case <-r.wake:
	default:
	}
}

// round writes the marks owed (m) and fetches due rows in one statement,
// publishes the rows, and waits for the confirms. When every row was
// acked, their marks are owed to the next fetch (markLinger); otherwise the
// results are recorded in one short transaction. Every write is fenced by
// the lease epoch. full reports a full batch (more rows are likely due).
func (r *Relay) round(ctx context.Context, pub *broker.Publisher, m *marks) (full bool, err error) {
	r.coveredWake()
	fctx, cancel := context.WithTimeout(ctx, dbTimeout)
	rows, err := m.db.FetchOutbox(fctx, m.epoch, r.cfg.BatchSize, m.owed)
	cancel()
	if err != nil {
		return false, &dbError{err}
	}
	r.written(m) // with the lease lost nothing was marked, but the broker has the events: the next leader publishes them again
	if len(rows) == 0 {
		return false, nil
	}
	errs := r.publishRows(ctx, pub, rows)
	r.testSignals.confirmed.reach(ctx)
	published, failed := r.results(rows, errs)
	if len(failed) == 0 {
		m.owe(published, rows, time.Now())
		return len(rows) == r.cfg.BatchSize, nil
	}
	rctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	attempts, err := m.db.RecordOutboxResults(rctx, m.epoch, published, failed, r.cfg.MaxAttempts)
	if err != nil {
		return false, &dbError{err}
	}
	r.report(rows, errs, attempts, time.Now())
	r.log.Debug("outbox round", "rows", len(rows), "published", len(published), "failed", len(failed))
	return len(rows) == r.cfg.BatchSize, nil
}

// publishRows publishes rows and returns one error per row, nil only for a
// broker ack of a routed message. Rows that never failed go out as one
// batch with deferred confirms; rows that failed before go out one by one,
// so a row that breaks its batch (for instance by closing the channel)
// holds up no other row on its retry. One deadline, ConfirmTimeout, covers
// the whole round.
func (r *Relay) publishRows(ctx context.Context, pub *broker.Publisher, rows []store.OutboxRow) []error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.ConfirmTimeout)
	defer cancel()
	errs := make([]error, len(rows))
	var fresh []int
	for i, row := range rows {
		if row.Attempts == 0 {
			fresh = append(fresh, i)
		}
	}
	r.publishSome(cctx, pub, rows, fresh, errs)
	for i, row := range rows {
		if row.Attempts > 0 {
			r.publishSome(cctx, pub, rows, []int{i}, errs)
		}
	}
	return errs
}

// publishSome publishes rows[idx] as one batch and stores their errors.
// While tracing is on, each message goes out under a publish span of its
// own, whose traceparent it carries; the span ends with the confirm.
func (r *Relay) publishSome(ctx context.Context, pub *broker.Publisher, rows []store.OutboxRow, idx []int, errs []error) {
	if len(idx) == 0 {
		return
	}
	if pub.IsClosed() {
		if err := pub.Reopen(); err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			return
		}
	}
	msgs := make([]broker.Message, len(idx))
	for k, i := range idx {
		msgs[k] = message(rows[i])
	}
	spans := r.startPublish(rows, idx, msgs)
	for k, err := range pub.PublishBatch(ctx, msgs) {
		errs[idx[k]] = err
	}
	// A channel closed under one message published alone, on a connection
	// that still opens channels, was closed because of that message.
	if i := idx[0]; len(idx) == 1 && errors.Is(errs[i], broker.ErrChannelClosed) && pub.Reopen() == nil {
		errs[i] = fmt.Errorf("%w: %w", errClosedByRow, errs[i])
	}
	for k, span := range spans {
		tracing.End(span, errs[idx[k]])
	}
}

// startPublish starts the publish span of each message of msgs (the rows
// idx), the child of its row's trace context or the root of a new trace,
// and puts the span's traceparent into the message's headers. It returns
// nil while tracing is off.
func (r *Relay) startPublish(rows []store.OutboxRow, idx []int, msgs []broker.Message) []trace.Span {
	if !r.cfg.Tracer.On() {
		return nil
	}
	spans := make([]trace.Span, len(msgs))
	for k, i := range idx {
		row, m := rows[i], &msgs[k]
		m.Headers = map[string]any{}
		spans[k] = r.cfg.Tracer.StartPublish(tracing.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey,
			MessageID: m.MessageID, EventType: m.Type, DedupeKey: row.DedupeKey, TraceContext: row.TraceContext,
			Headers: broker.HeaderCarrier(m.Headers)})
	}
	return spans
}

// errClosedByRow marks a channel closed by the broker because of one row
// (for instance, its exchange does not exist): the row's own failure.
var errClosedByRow = errors.New("the broker closed the channel on this message alone")

// message is the AMQP message of a row (docs/contract.md, "Output").
func message(row store.OutboxRow) broker.Message {
	return broker.Message{
		Exchange: row.Exchange, RoutingKey: row.RoutingKey, MessageID: row.EventID, Type: row.EventType,
		ContentType: "application/json", Timestamp: row.CreatedAt, Body: row.Payload,
		Mandatory: true, Persistent: true,
	}
}

// results splits a round into the ids to mark published and the failures.
func (r *Relay) results(rows []store.OutboxRow, errs []error) ([]int64, []store.OutboxFailure) {
	var published []int64
	var failed []store.OutboxFailure
	acked := false
	for _, err := range errs {
		acked = acked || err == nil
	}
	for i, row := range rows {
		if errs[i] == nil {
			published = append(published, row.ID)
			continue
		}
		reason, own := classify(errs[i])
		mayDie, retryMax := own || acked, r.cfg.RetryBackoffMax
		if reason == mailtype.ReasonUnroutable {
			// Nobody has bound a queue for it yet: not the row's fault
			// until the window is over.
			mayDie, retryMax = time.Since(row.CreatedAt) >= r.cfg.UnroutableWindow, r.cfg.UnroutableBackoffMax
		}
		failed = append(failed, store.OutboxFailure{
			ID:      row.ID,
			Error:   describe(reason, errs[i], row),
			RetryIn: backoff.Delay(row.Attempts+1, r.cfg.RetryBackoff, retryMax),
			MayDie:  mayDie,
			// An unroutable row stops holding back its order's later rows.
			Unroutable: reason == mailtype.ReasonUnroutable,
		})
	}
	return published, failed
}

// classify maps a publish error to its metric reason. own reports a
// failure that is the message's own (nack, unroutable, a channel closed on
// it alone); a timeout or a
// closed channel may be the broker's, and counts toward dead only when the
// broker acked another row of the same round.
func classify(err error) (reason mailtype.Reason, own bool) {
	switch {
	case errors.Is(err, broker.ErrNacked):
		return mailtype.ReasonNack, true
	case errors.Is(err, broker.ErrReturned):
		return mailtype.ReasonUnroutable, true
	case errors.Is(err, errClosedByRow):
		return mailtype.ReasonBroker, true
	case errors.Is(err, broker.ErrConfirmTimeout), errors.Is(err, context.DeadlineExceeded):
		return mailtype.ReasonTimeout, false
	default:
		return mailtype.ReasonBroker, false
	}
}

// describe is the sanitized last_error of a failed publish.
func describe(reason mailtype.Reason, err error, row store.OutboxRow) string {
	msg := fmt.Sprintf("%s: %v", reason, err)
	if reason == mailtype.ReasonUnroutable || errors.Is(err, errClosedByRow) {
		msg += fmt.Sprintf(" (exchange %q, routing key %q)", row.Exchange, row.RoutingKey)
	}
	return mailtype.Sanitize(msg)
}

// report counts the round in the metrics and logs failures: one warning
// per round, one error per row that just went dead.
func (r *Relay) report(rows []store.OutboxRow, errs []error, attempts []store.OutboxAttempt, now time.Time) {
	failures := map[mailtype.Reason]int{}
	var first error
	for i, row := range rows {
		if errs[i] == nil {
			r.m.Published.WithLabelValues(row.EventType).Inc()
			r.m.PublishLag.Observe(max(0, now.Sub(row.CreatedAt).Seconds()))
			continue
		}
		reason, _ := classify(errs[i])
		r.m.Failures.WithLabelValues(string(reason)).Inc()
		failures[reason]++
		if first == nil {
			first = errs[i]
		}
	}
	if first != nil {
		r.log.Warn("outbox publishes failed, will retry", "rows", len(rows), "failed", len(attempts), "by_reason", failures, "error", first)
	}
	for _, a := range attempts {
		if a.Dead {
			r.log.Error("outbox row is dead: publishing gave up after max attempts; it needs an operator",
				"event_id", a.EventID, "event_type", a.EventType, "dedupe_key", a.DedupeKey, "attempts", a.Attempts, "outbox_id", a.ID)
		}
	}
}

// retain deletes published rows older than the retention window, in
// batches of RetentionBatch, at most maxRetentionDeletes batches per pass.
func (r *Relay) retain(ctx context.Context, db DB) error {
	if r.cfg.RetentionWindow <= 0 {
		return nil
	}
	before := time.Now().Add(-r.cfg.RetentionWindow)
	var total int64
	for i := 0; i < maxRetentionDeletes; i++ {
		dctx, cancel := context.WithTimeout(ctx, dbTimeout)
		n, err := db.DeletePublishedOutbox(dctx, before, r.cfg.RetentionBatch)
		cancel()
		if err != nil {
			return &dbError{err}
		}
		total += n
		if n < int64(r.cfg.RetentionBatch) {
			break
		}
	}
	if total > 0 {
		r.log.Info("deleted published outbox rows past retention", "rows", total, "published_before", before)
	}
	return nil
}
