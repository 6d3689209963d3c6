package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// ReplayOptions say what a Replayer moves where.
type ReplayOptions struct {
	// Queue is the dead-letter queue read from; Exchange the input
	// exchange replayed to, each message with its OriginalRoutingKey.
	Queue, Exchange string
	// Limit is the most messages one Run handles (replays, would replay
	// or skips); 0 means every message present when the Replayer was
	// made.
	Limit int
	// Filter selects the messages replayed; the others stay in the queue,
	// in their place. Its zero value selects all.
	Filter Filter
	// Rate is the most messages replayed per second; it must be > 0.
	Rate float64
	// DryRun lists what would be replayed and changes nothing: every
	// message read is returned to the queue by Close.
	DryRun bool
	// ConfirmTimeout bounds each republish and its confirm; 0 means 10s.
	ConfirmTimeout time.Duration
	// Report, when set, is called for every message handled.
	Report func(Handled)
}

// Action is what a replay did with one message.
type Action string

// The actions of a replay.
const (
	// Skipped: no original routing key; the message stays in the queue.
	Skipped Action = "skip"
	// WouldReplay: a dry run would replay it.
	WouldReplay Action = "would replay"
	// Replayed: republished with a confirm, then removed from the queue.
	Replayed Action = "replayed"
)

// Item names one dead-lettered message.
type Item struct {
	MessageID, Type string
	// RoutingKey is its OriginalRoutingKey, Reason its Reason.
	RoutingKey, Reason string
}

// String is the item as an operator reads it.
func (i Item) String() string {
	return fmt.Sprintf("message_id=%s type=%s routing_key=%s reason=%s", i.MessageID, i.Type, i.RoutingKey, i.Reason)
}

// Handled is one message a replay handled and what it did.
type Handled struct {
	Action Action
	Item   Item
}

// Result counts what a Run did.
type Result struct {
	// Depth is the number of messages in the queue when the Replayer was
	// made; Replayed (would-replay in a dry run) and Skipped count the
	// messages handled; Unmatched the messages read that Filter left in
	// the queue.
	Depth, Replayed, Skipped, Unmatched int
}

// BrokerError is a replay's failure to talk to the broker (a channel, a
// read, a publish or its confirm, an ack). The message at hand stays in
// the dead-letter queue.
type BrokerError struct{ Err error }

func (e *BrokerError) Error() string { return e.Err.Error() }

func (e *BrokerError) Unwrap() error { return e.Err }

// Replayer moves messages from the dead-letter queue back to the input
// exchange: a message leaves the queue only after the broker confirmed its
// republish, and one Run handles at most the messages present when the
// Replayer was made, so a message that is still bad and is dead-lettered
// again waits for the next run instead of looping. It is not safe for
// concurrent use.
type Replayer struct {
	conn    *broker.Conn
	o       ReplayOptions
	get     *broker.Getter
	pub     *broker.Publisher
	limiter *rate.Limiter
	res     Result
}

// NewReplayer opens its channels on conn and reads the depth of o.Queue.
// A missing queue gives an error wrapping broker.ErrNoQueue; any other
// failure is a *BrokerError.
func NewReplayer(conn *broker.Conn, o ReplayOptions) (*Replayer, error) {
	if o.Rate <= 0 || o.Limit < 0 {
		return nil, errors.New("replay: Rate must be > 0 and Limit >= 0")
	}
	if o.ConfirmTimeout <= 0 {
		o.ConfirmTimeout = 10 * time.Second
	}
	if o.Report == nil {
		o.Report = func(Handled) {}
	}
	get, err := broker.NewGetter(conn)
	if err != nil {
		return nil, &BrokerError{Err: err}
	}
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		get.Close()
		return nil, &BrokerError{Err: err}
	}
	r := &Replayer{conn: conn, o: o, get: get, pub: pub, limiter: rate.NewLimiter(rate.Limit(o.Rate), 1)}
	depth, err := get.Depth(o.Queue)
	if err != nil {
		r.Close()
		if errors.Is(err, broker.ErrNoQueue) {
			return nil, err
		}
		return nil, &BrokerError{Err: err}
	}
	r.res.Depth = depth
	return r, nil
}

// Close closes the channels; the broker requeues every message read and
// not removed (skipped ones, unmatched ones, a dry run's), and Close waits
// (a few seconds at most) until they are back in the queue.
func (r *Replayer) Close() {
	_ = r.pub.Close()
	_ = r.get.Close()
	kept, removed := r.res.Skipped+r.res.Unmatched, r.res.Replayed
	if r.o.DryRun {
		kept, removed = kept+r.res.Replayed, 0
	}
	waitReturned(r.conn, r.o.Queue, kept, r.res.Depth-removed)
}

// Result is what Run did so far.
func (r *Replayer) Result() Result { return r.res }

// Run reads the messages present when the Replayer was made, in queue
// order, and handles those Filter selects, at most Limit of them, at most
// Rate per second; it stops early when the queue is empty. It returns
// ctx's error when ctx ends, or a *BrokerError.
func (r *Replayer) Run(ctx context.Context) error {
	for range r.res.Depth {
		if r.o.Limit > 0 && r.res.Replayed+r.res.Skipped >= r.o.Limit {
			return nil
		}
		got, ok, err := r.get.Get(r.o.Queue)
		if err != nil {
			return &BrokerError{Err: err}
		}
		if !ok {
			return nil // someone else emptied it
		}
		if !r.o.Filter.Match(NewEntry(0, got.Message), time.Now()) {
			r.res.Unmatched++ // held unacked until the end, then requeued by Close
			continue
		}
		if err := r.one(ctx, got); err != nil {
			return err
		}
	}
	return nil
}

// one replays one message: publish with confirm, then ack; anything else
// leaves it in the dead-letter queue.
func (r *Replayer) one(ctx context.Context, got *broker.Got) error {
	key := OriginalRoutingKey(got.Headers)
	item := Item{MessageID: got.MessageID, Type: got.Type, RoutingKey: key, Reason: Reason(got.Headers)}
	if key == "" {
		r.res.Skipped++ // held unacked until the end, then requeued by Close
		r.o.Report(Handled{Action: Skipped, Item: item})
		return nil
	}
	if r.o.DryRun {
		r.res.Replayed++ // held unacked; Close requeues it
		r.o.Report(Handled{Action: WouldReplay, Item: item})
		return nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return err
	}
	m := got.Message
	m.Exchange, m.RoutingKey, m.Mandatory = r.o.Exchange, key, true
	m.Headers = ReplayHeaders(got.Headers)
	pctx, cancel := context.WithTimeout(ctx, r.o.ConfirmTimeout)
	defer cancel()
	if err := r.pub.Publish(pctx, m); err != nil {
		_ = got.Requeue()
		return &BrokerError{Err: fmt.Errorf("republish %s to %s: %w; it stays in the dead-letter queue", item, r.o.Exchange, broker.PublishHint(err))}
	}
	if err := got.Ack(); err != nil {
		// Published but still in the DLQ: a later replay repeats it, and the
		// consumer's dedupe by event_id makes that harmless.
		return &BrokerError{Err: fmt.Errorf("remove %s from the dead-letter queue after its republish: %w", item, err)}
	}
	r.res.Replayed++
	r.o.Report(Handled{Action: Replayed, Item: item})
	return nil
}
