package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// settle finishes a recorded flight: it acks the deliveries the commit
// settled, publishes the poison ones to the dead-letter exchange and acks
// them once confirmed. Poison the dead-letter queue refuses (full) is held
// unacknowledged and retried in the background (hold.go), without holding
// up the flights behind it. Every ack follows the commit or confirm that
// settles its delivery. An error means the channel can no longer ack this
// batch: the connection ends and the broker redelivers what was not acked.
func (l *loop) settle(ctx context.Context, f *flight) error {
	batch, decisions := f.batch, f.decisions
	var dead, settled []int
	for i, d := range decisions {
		if d.Action == ActionDeadLetter {
			dead = append(dead, i)
		} else {
			settled = append(settled, i)
		}
	}
	if len(dead) == 0 && l.held.Load() == 0 {
		// Flights settle in order and nothing earlier is held, so every
		// earlier tag on this channel is acked already and one multiple
		// ack covers exactly this batch.
		if err := l.ch.Ack(batch[len(batch)-1].Tag, len(batch) > 1); err != nil {
			return fmt.Errorf("ack batch: %w", err)
		}
		l.done(f, settled)
		return nil
	}
	// Neighbours are acked before the poison is dealt with, one by one
	// (a multiple ack would cover the poison, or a held message, too).
	if err := l.ackEach(f, settled); err != nil {
		return err
	}
	if len(dead) == 0 {
		return nil
	}
	refused, err := l.publishDead(ctx, batch, decisions, dead)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		l.hold(f, refused)
	}
	return l.ackEach(f, without(dead, refused))
}

// without returns the elements of all not in some (both in order).
func without(all, some []int) []int {
	if len(some) == 0 {
		return all
	}
	out := make([]int, 0, len(all)-len(some))
	j := 0
	for _, i := range all {
		if j < len(some) && some[j] == i {
			j++
			continue
		}
		out = append(out, i)
	}
	return out
}

func (l *loop) ackEach(f *flight, idx []int) error {
	for _, i := range idx {
		if err := l.ch.Ack(f.batch[i].Tag, false); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	l.done(f, idx)
	return nil
}

// record records the decisions to record, all in one transaction,
// retrying until it commits (see ingest). results is aligned with
// decisions. A database error never turns an event into a dead letter:
// Decide dead-letters what PostgreSQL could not store, before it gets
// here.
func (l *loop) record(ctx context.Context, decisions []Decision) ([]store.IngestResult, error) {
	results := make([]store.IngestResult, len(decisions))
	var idx []int
	var items []store.IngestItem
	for i, d := range decisions {
		if d.Action == ActionRecord {
			idx = append(idx, i)
			items = append(items, d.Item)
		}
	}
	if len(items) == 0 {
		return results, nil
	}
	res, err := l.ingest(ctx, items)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for j, i := range idx {
		if res[j].Disposition == mailtype.DispositionEventIDReused {
			decisions[i] = reusedEventID(decisions[i])
			continue
		}
		results[i] = res[j]
		if res[j].Disposition != mailtype.DispositionDuplicate {
			l.c.metrics.EventLag.Observe(max(0, now.Sub(decisions[i].OccurredAt).Seconds()))
		}
	}
	l.wake(res)
	return results, nil
}

// reusedEventID turns the decision to record d, whose event_id an event of
// another intent already used, into a dead letter: taking it for a
// redelivery would lose its mail without a word (docs/contract.md,
// "Input": a new intent needs a new event_id).
func reusedEventID(d Decision) Decision {
	return deadLetter(d.EventType, d.EventID, permanent(mailtype.ReasonInvalidField,
		"event_id %s was already used by an event with another dedupe_key; a new intent (%s) needs a new event_id",
		d.EventID, d.Item.Mail.DedupeKey))
}

// ingest records items, retrying every failure with capped exponential
// backoff while holding the deliveries: an unreachable database, a
// serialization failure or a statement timeout, and a refusal of the
// statement too (a bug of ours or a database that does not take writes,
// never the events' fault). It returns only on success, when ctx ends or
// the channel dies, or with errWritesRefused when the database refused
// writes (read-only, privilege) writeRefusalsBeforeRelease attempts in a
// row and the deliveries are to be given back.
func (l *loop) ingest(ctx context.Context, items []store.IngestItem) ([]store.IngestResult, error) {
	refusals := 0
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, l.c.cfg.StatementTimeout)
		res, err := l.c.store.Ingest(sctx, items)
		cancel()
		if err == nil {
			l.c.refusal.committed()
			if attempt > 1 {
				l.c.log.Info("events recorded after retries", "attempts", attempt, "events", len(items))
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		refusals = l.countRefusal(err, refusals)
		if refusals >= writeRefusalsBeforeRelease && l.release() {
			return nil, errWritesRefused
		}
		l.c.metrics.IngestRetries.Inc()
		if attempt == 1 || attempt%10 == 0 {
			l.logRetry(err, attempt, len(items))
		}
		if err := l.pause(ctx, backoff.Delay(attempt, l.c.cfg.RetryBackoff, l.c.cfg.RetryBackoffMax)); err != nil {
			return nil, err
		}
	}
}

// logRetry logs a failed attempt to record events: an error, with its
// SQLSTATE, when the database refused the statement (someone must look),
// a warning when it could not be reached.
func (l *loop) logRetry(err error, attempt, events int) {
	var re *store.RefusedError
	if errors.As(err, &re) {
		l.c.log.Error("the database refused to record events; holding them and retrying (not the events' fault: nothing is dead-lettered)",
			"sqlstate", re.SQLState, "error", err, "attempt", attempt, "events", events)
		return
	}
	l.c.log.Warn("recording events failed; holding them and retrying", "error", err, "attempt", attempt, "events", events)
}

// deadLetterAttempts is how often publishDead tries before it ends the
// connection: the reconnect declares the topology again, which repairs a
// deleted dead-letter queue or binding (the usual cause of returns).
const deadLetterAttempts = 3

// publishDead publishes the dead deliveries to the dead-letter exchange
// and waits for their confirms, retrying those not confirmed (timeout,
// unroutable) with backoff. It returns the ones the broker nacked (the
// dead-letter queue refuses them: full), for the caller to hold. A closed
// publish channel, or deadLetterAttempts failures, end the connection
// instead: the messages are not acked, so they come back and are
// dead-lettered then.
func (l *loop) publishDead(ctx context.Context, batch []broker.Delivery, decisions []Decision, dead []int) (refused []int, err error) {
	pending := dead
	for attempt := 1; ; attempt++ {
		errs := l.publishLetters(ctx, batch, decisions, pending)
		var failed []int
		var lastErr error
		for j, err := range errs {
			switch {
			case err == nil:
			case errors.Is(err, broker.ErrNacked):
				refused = append(refused, pending[j])
			default:
				failed, lastErr = append(failed, pending[j]), err
			}
		}
		if len(failed) == 0 {
			slices.Sort(refused)
			return refused, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(lastErr, broker.ErrChannelClosed) || l.pub.IsClosed() || attempt == deadLetterAttempts {
			return nil, fmt.Errorf("dead-letter to %s (attempt %d): %w", l.c.cfg.DeadLetterExchange, attempt, lastErr)
		}
		l.c.log.Warn("dead-lettering failed; holding the messages and retrying", "error", lastErr, "attempt", attempt, "messages", len(failed))
		pending = failed
		if err := l.pause(ctx, backoff.Delay(attempt, l.c.cfg.RetryBackoff, l.c.cfg.RetryBackoffMax)); err != nil {
			return nil, err
		}
	}
}

// publishLetters publishes batch[idx] to the dead-letter exchange and
// waits for the confirms (ConfirmTimeout); one error per index. The
// publisher is shared with the holders (hold.go), one caller at a time.
func (l *loop) publishLetters(ctx context.Context, batch []broker.Delivery, decisions []Decision, idx []int) []error {
	letters := make([]deadletter.Letter, len(idx))
	for j, i := range idx {
		letters[j] = deadletter.Letter{Delivery: batch[i], Err: decisions[i].Err}
	}
	cctx, cancel := context.WithTimeout(ctx, l.c.cfg.ConfirmTimeout)
	defer cancel()
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	return deadletter.Publish(cctx, l.pub, l.c.cfg.DeadLetterExchange, letters)
}

// wake calls the in-process wake-ups after a commit.
func (l *loop) wake(res []store.IngestResult) {
	mail, outbox := false, false
	for _, r := range res {
		mail = mail || (r.Disposition == mailtype.DispositionInserted && !r.Leased) // a leased row is in the pool already
		outbox = outbox || r.Feedback > 0
	}
	if mail {
		l.c.onMail()
	}
	if outbox {
		l.c.onOutbox()
	}
}

// done counts, logs and ends the spans of the acked deliveries idx of f.
func (l *loop) done(f *flight, idx []int) {
	batch, decisions, results := f.batch, f.decisions, f.results
	for _, i := range idx {
		d := decisions[i]
		outcome, reason := results[i].Disposition, mailtype.Reason("")
		switch d.Action {
		case ActionIgnore:
			outcome = mailtype.DispositionIgnored
		case ActionDeadLetter:
			outcome, reason = mailtype.DispositionDeadLettered, d.Err.Reason
		}
		l.c.metrics.observe(d.EventType, outcome, reason, batch[i].Received)
		l.logDisposition(batch[i], d, outcome)
		f.endSpan(i, outcome)
	}
}

func (l *loop) logDisposition(r broker.Delivery, d Decision, outcome mailtype.Disposition) {
	args := []any{"event_id", d.EventID, "event_type", d.EventType, "outcome", string(outcome), "routing_key", r.RoutingKey,
		"redelivered", r.Redelivered}
	if m := d.Item.Mail; m != nil {
		args = append(args, "dedupe_key", m.DedupeKey)
	}
	if c := d.Item.Cancel; c != nil {
		args = append(args, "dedupe_key", mailtype.ConfirmationKey(c.OrderID))
	}
	switch outcome {
	case mailtype.DispositionDeadLettered:
		l.c.log.Warn("event dead-lettered", append(args, "reason", string(d.Err.Reason), "error", mailtype.Sanitize(d.Err.Error()))...)
	case mailtype.DispositionHeld:
		l.c.log.Warn("mail held: its recipient is over mail.recipient_limit", args...)
	case mailtype.DispositionInserted, mailtype.DispositionDuplicate, mailtype.DispositionIgnored:
		l.c.log.Debug("event consumed", args...)
	default:
		l.c.log.Info("event consumed", args...)
	}
}
