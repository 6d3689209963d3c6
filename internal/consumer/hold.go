package consumer

import (
	"errors"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/broker"
)

// A poison message whose dead-letter publish the broker nacks was refused
// by the dead-letter queue: it is full (amqp.max_dead_letter_queue_length,
// x-overflow reject-publish). Acking it would drop it and nacking it
// would loop, so the consumer holds it: unacknowledged, counted
// (mailsvc_dead_letter_refusals_total, mailsvc_dead_letters_held) and
// republished with capped backoff (RetryBackoff up to HoldBackoffMax) from
// a goroutine of its own, until the broker takes it, then acked. The
// flights behind it go on (acked one by one while anything is held), and
// each held message takes one prefetch slot, so a full dead-letter queue
// stops intake only once the whole prefetch window is poison. When the
// connection ends, what is still held goes back to the queue with the
// channel and is dead-lettered again on its next delivery.

// hold holds f's deliveries idx, which the dead-letter queue refused.
func (l *loop) hold(f *flight, idx []int) {
	n := len(idx)
	l.held.Add(int64(n))
	l.c.metrics.DeadLettersHeld.Add(float64(n))
	l.c.metrics.DeadLetterRefusals.Add(float64(n))
	ids := make([]string, n)
	for j, i := range idx {
		ids[j] = f.decisions[i].EventID
	}
	l.c.log.Error("the dead-letter queue refuses dead letters (full?): holding them unacknowledged and retrying; nothing is dropped",
		"dead_letter_queue", l.c.cfg.DeadLetterQueue, "messages", n, "event_ids", ids)
	l.holders.Add(1)
	go func() {
		defer l.holders.Done()
		l.retryHeld(f, idx)
	}()
}

// retryHeld republishes the held deliveries idx of f until each is
// confirmed and acked, or the loop ends its holds (the connection ends, or
// the loop finished: they go back to the queue with the channel).
func (l *loop) retryHeld(f *flight, idx []int) {
	pending := idx
	defer func() {
		l.unhold(len(pending))
		f.abandonSome(pending)
	}()
	for attempt := 1; len(pending) > 0; attempt++ {
		if err := l.pause(l.holdCtx, backoff.Delay(attempt, l.c.cfg.RetryBackoff, l.c.cfg.HoldBackoffMax)); err != nil {
			return
		}
		errs := l.publishLetters(l.holdCtx, f.batch, f.decisions, pending)
		var ok, still []int
		refused := 0
		var lastErr error
		for j, err := range errs {
			if err == nil {
				ok = append(ok, pending[j])
				continue
			}
			still, lastErr = append(still, pending[j]), err
			if isNack(err) {
				refused++
			}
		}
		l.c.metrics.DeadLetterRefusals.Add(float64(refused))
		if len(ok) > 0 {
			if err := l.ackEach(f, ok); err != nil {
				return // the channel is gone: everything pending returns to the queue
			}
			l.unhold(len(ok))
			pending = still
			l.c.log.Info("held dead letters taken by the dead-letter queue", "messages", len(ok), "still_held", len(still), "attempt", attempt)
			continue
		}
		if attempt%10 == 0 {
			l.c.log.Warn("the dead-letter queue still refuses held dead letters; retrying", "error", lastErr, "messages", len(still), "attempt", attempt)
		}
	}
}

// unhold counts n held deliveries as no longer held.
func (l *loop) unhold(n int) {
	l.held.Add(-int64(n))
	l.c.metrics.DeadLettersHeld.Sub(float64(n))
}

// endHolds stops the holders and waits for them; what they held goes back
// to the queue with the channel.
func (l *loop) endHolds() {
	l.stopHolds()
	l.holders.Wait()
}

func isNack(err error) bool { return errors.Is(err, broker.ErrNacked) }
