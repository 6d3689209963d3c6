package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Headers of a republished feedback event (docs/contract.md, "Output"):
// the message is the one the relay published first, same message_id and
// body (its event_id), with these two headers added.
const (
	// HeaderRepublish is true on a message `mailsvc outbox republish`
	// sent again.
	HeaderRepublish = "x-mailsvc-republish"
	// HeaderOriginalPublishedAt is when the relay first published it,
	// RFC 3339 in UTC.
	HeaderOriginalPublishedAt = "x-mailsvc-original-published-at"
)

// RepublishMessage is the AMQP message of a published event sent again:
// the message the relay published (same exchange, routing key, message_id,
// type, timestamp and body) with HeaderRepublish and
// HeaderOriginalPublishedAt.
func RepublishMessage(e store.PublishedEvent) broker.Message {
	m := message(e.OutboxRow)
	m.Headers = map[string]any{
		HeaderRepublish:           true,
		HeaderOriginalPublishedAt: e.PublishedAt.UTC().Format(time.RFC3339Nano),
	}
	return m
}

// RepublishOptions pace a Republish.
type RepublishOptions struct {
	// Rate is the most messages per second; it must be > 0.
	Rate float64
	// ConfirmTimeout bounds each batch and its confirms; 0 means 10s.
	ConfirmTimeout time.Duration
	// Report, when set, is called for every confirmed message, in order.
	Report func(store.PublishedEvent)
}

// republishBatch is the most messages of one confirmed batch.
const republishBatch = 100

// Republish publishes events in the order given on pub (confirm mode),
// at most o.Rate per second, in batches each confirmed before the next
// one goes out, so that one order's events arrive in the order given. It
// stops at the first batch with a failure and returns how many events
// were confirmed before it (an event of the failed batch may have arrived
// too: consumers dedupe on event_id) and the error, which names the event.
func Republish(ctx context.Context, pub *broker.Publisher, events []store.PublishedEvent, o RepublishOptions) (int, error) {
	if o.Rate <= 0 {
		return 0, errors.New("republish: Rate must be > 0")
	}
	if o.ConfirmTimeout <= 0 {
		o.ConfirmTimeout = 10 * time.Second
	}
	size := max(1, min(int(o.Rate), republishBatch))
	limiter := rate.NewLimiter(rate.Limit(o.Rate), size)
	done := 0
	for done < len(events) {
		batch := events[done:min(done+size, len(events))]
		if err := limiter.WaitN(ctx, len(batch)); err != nil {
			return done, err
		}
		if err := republishOne(ctx, pub, batch, o); err != nil {
			return done, err
		}
		done += len(batch)
	}
	return done, nil
}

// republishOne publishes one batch and waits for its confirms.
func republishOne(ctx context.Context, pub *broker.Publisher, batch []store.PublishedEvent, o RepublishOptions) error {
	msgs := make([]broker.Message, len(batch))
	for i, e := range batch {
		msgs[i] = RepublishMessage(e)
	}
	cctx, cancel := context.WithTimeout(ctx, o.ConfirmTimeout)
	defer cancel()
	errs := pub.PublishBatch(cctx, msgs)
	for i, err := range errs {
		if err != nil {
			e := batch[i]
			return fmt.Errorf("republish %s %s (outbox row %d) to %s: %w", e.EventType, e.EventID, e.ID, e.Exchange, broker.PublishHint(err))
		}
	}
	if o.Report != nil {
		for _, e := range batch {
			o.Report(e)
		}
	}
	return nil
}
