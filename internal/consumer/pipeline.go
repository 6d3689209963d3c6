package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/store"
)

// The loop is a pipeline of three stages, so that deciding (parsing and
// rendering, CPU) overlaps recording (the database) and several batches
// can be in the database at once:
//
//	receive: collect a batch, decide it, queue it as a flight (in order)
//	record:  one goroutine per flight records it (store.Ingest, retried)
//	settle:  in delivery order, wait for each flight's commit, then
//	         dead-letter its poison messages and ack it
//
// At most MaxInFlight flights exist at once; when they are all held (the
// database is down), receive stops taking deliveries. Acking in order
// keeps a multiple ack exact: when a flight is acked, every earlier tag on
// the channel is acked already.

// flight is one batch on its way through the pipeline.
type flight struct {
	batch     []broker.Delivery
	decisions []Decision
	// results and err are written by the flight's recorder before done is
	// closed; err means the batch cannot be acked on this channel.
	results []store.IngestResult
	err     error
	done    chan struct{}
	// spans holds the process span of each delivery until it is acked
	// (nil once ended; nil slice while tracing is off). spanMu guards it:
	// the holder of a refused dead letter (hold.go) ends its span from a
	// goroutine of its own.
	spanMu sync.Mutex
	spans  []trace.Span
}

// errDeliveriesClosed: the library closed the deliveries channel without
// a stop (the channel died); the connection must end.
var errDeliveriesClosed = errors.New("deliveries channel closed")

// run consumes until the channel fails (an error), until a recorder
// released the deliveries because the database refuses writes
// (errWritesRefused), or, after Stop, until every delivery already
// received has been recorded and acked (nil).
func (l *loop) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.end = cancel
	l.holdCtx, l.stopHolds = context.WithCancel(ctx)
	flights := make(chan *flight, l.c.cfg.MaxInFlight-1)
	settled := make(chan error, 1)
	go func() { settled <- l.settleInOrder(ctx, cancel, flights) }()
	recvErr := l.receive(ctx, flights)
	close(flights)
	if recvErr != nil {
		cancel()
	}
	settleErr := <-settled
	l.recorders.Wait()
	if n := l.held.Load(); n > 0 {
		l.c.log.Warn("dead letters the dead-letter queue refused go back to the queue", "messages", n)
	}
	l.endHolds()
	switch {
	case l.released.Load():
		return errWritesRefused
	case settleErr != nil && !errors.Is(settleErr, context.Canceled):
		return settleErr
	case recvErr != nil:
		return recvErr
	default:
		return settleErr
	}
}

// receive decides batches and queues them as flights, each recorded by a
// goroutine of its own. After Stop it cancels the consumer and keeps
// going until the library closes the deliveries channel.
func (l *loop) receive(ctx context.Context, flights chan<- *flight) error {
	stop := l.c.stopping
	stopped := false
	for {
		select {
		case first, ok := <-l.in:
			if !ok {
				if stopped {
					return nil
				}
				return l.goneError(errDeliveriesClosed)
			}
			f := l.decide(l.collect(first))
			select {
			case flights <- f: // waits while MaxInFlight flights are unsettled
			case <-ctx.Done():
				f.abandon()
				return ctx.Err()
			}
			l.recorders.Add(1)
			go func() {
				defer l.recorders.Done()
				defer close(f.done)
				f.results, f.err = l.record(ctx, f.decisions)
			}()
		case <-stop:
			stop, stopped = nil, true
			// After cancel-ok no delivery follows; the library then closes
			// the deliveries channel once we have read what it holds.
			if err := l.ch.Cancel(l.tag); err != nil {
				return fmt.Errorf("cancel consumer: %w", err)
			}
			l.c.log.Info("stopping: consumer cancelled, finishing deliveries in flight")
		case <-l.gone.done:
			return l.gone.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// parallelDecideMin is the smallest batch whose decisions are spread over
// several goroutines; rendering a mail costs tens of microseconds, so a
// large batch is worth splitting, a small one is not.
const parallelDecideMin = 32

// decide classifies every delivery of batch (CPU only, no I/O), on up to
// GOMAXPROCS goroutines for a large batch.
func (l *loop) decide(batch []broker.Delivery) *flight {
	f := &flight{batch: batch, decisions: make([]Decision, len(batch)), done: make(chan struct{})}
	workers := min(runtime.GOMAXPROCS(0), len(batch)/parallelDecideMin+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(batch); i += workers {
				r := batch[i]
				if r.Redelivered {
					l.c.metrics.Redelivered.Inc()
				}
				f.decisions[i] = l.c.decider.Decide(Message{Body: r.Body, MessageID: r.MessageID})
			}
		})
	}
	wg.Wait()
	l.traceFlight(f)
	return f
}

// settleInOrder settles flights in the order they were queued; the first
// one that cannot be settled ends the loop (cancel stops the others, and
// the spans of every delivery left unacked end).
func (l *loop) settleInOrder(ctx context.Context, cancel context.CancelFunc, flights <-chan *flight) error {
	for f := range flights {
		<-f.done // a recorder always finishes: on success, on error, or when ctx ends
		err := f.err
		if err == nil {
			err = l.settle(ctx, f)
		}
		if err != nil {
			cancel()
			f.abandon()
			for rest := range flights { // receive closes flights once it has seen the cancel
				rest.abandon()
			}
			return err
		}
	}
	return nil
}
