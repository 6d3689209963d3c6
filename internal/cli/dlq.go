package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
)

func newDLQCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Work with the dead-letter queue"}
	cmd.AddCommand(newDLQReplayCmd(e))
	return cmd
}

// replayOptions are the flags of `dlq replay`.
type replayOptions struct {
	limit  int
	rate   float64
	dryRun bool
}

func newDLQReplayCmd(e *env) *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay [--limit N] [--rate R] [--dry-run]",
		Short: "Move dead-lettered messages back to the input exchange with their original routing key",
		Long: `Moves dead-lettered messages back to amqp.input_exchange, each with its original
routing key, at most --rate messages per second. A message leaves the dead-letter queue only
after the broker confirmed its republish; on any error it stays there. One run handles at most
the messages present when it starts, so a message that is still bad and is dead-lettered again
waits for the next run instead of looping.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if o.rate <= 0 || o.limit < 0 {
				return errors.New("--rate must be > 0 and --limit >= 0")
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			return replayDLQ(e.ctx, e.stdout, cfg, o)
		},
	}
	cmd.Flags().IntVar(&o.limit, "limit", 0, "replay at most N messages (0: every message present at start)")
	cmd.Flags().Float64Var(&o.rate, "rate", 20, "at most R messages per second")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be replayed; change nothing")
	return cmd
}

// replayer moves messages from the dead-letter queue to the input exchange.
type replayer struct {
	out      io.Writer
	get      *broker.Getter
	pub      *broker.Publisher
	queue    string
	exchange string
	limiter  *rate.Limiter
	dryRun   bool
	replayed int
	skipped  int
}

func replayDLQ(ctx context.Context, out io.Writer, cfg *config.Config, o replayOptions) error {
	conn, err := broker.Dial(broker.Config{URL: cfg.AMQP.URL.Reveal(), Name: "mailsvc-dlq-replay", DialTimeout: connectTimeout})
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("%w (check amqp.url, or start RabbitMQ)", err)}
	}
	defer conn.Close()
	get, err := broker.NewGetter(conn)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	defer get.Close() // requeues whatever was read and not acked
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	defer pub.Close()
	r := &replayer{out: out, get: get, pub: pub, queue: cfg.AMQP.DeadLetterQueue, exchange: cfg.AMQP.InputExchange,
		limiter: rate.NewLimiter(rate.Limit(o.rate), 1), dryRun: o.dryRun}
	depth, err := get.Depth(r.queue)
	if errors.Is(err, broker.ErrNoQueue) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("%w (amqp.dead_letter_queue; `mailsvc serve` declares it)", err)}
	}
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	n := depth
	if o.limit > 0 && o.limit < n {
		n = o.limit
	}
	err = r.run(ctx, n)
	fmt.Fprintln(out, r.summary(depth))
	return err
}

// run handles at most n messages.
func (r *replayer) run(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		if !r.dryRun {
			if err := r.limiter.Wait(ctx); err != nil {
				return err
			}
		}
		got, ok, err := r.get.Get(r.queue)
		if err != nil {
			return &ExitError{Code: ExitUnavailable, Err: err}
		}
		if !ok {
			return nil // someone else emptied it
		}
		if err := r.one(ctx, got); err != nil {
			return err
		}
	}
	return nil
}

// one replays one message: publish with confirm, then ack; anything else
// leaves it in the dead-letter queue.
func (r *replayer) one(ctx context.Context, got *broker.Got) error {
	key := broker.OriginalRoutingKey(got.Headers)
	desc := fmt.Sprintf("message_id=%s type=%s routing_key=%s reason=%s", got.MessageID, got.Type, key, broker.DeadLetterReason(got.Headers))
	if key == "" {
		r.skipped++ // held unacked until the end, then requeued by Close
		fmt.Fprintf(r.out, "skip %s: no original routing key in its headers\n", desc)
		return nil
	}
	if r.dryRun {
		r.replayed++ // held unacked; Close requeues it
		fmt.Fprintf(r.out, "would replay %s\n", desc)
		return nil
	}
	m := got.Message
	m.Exchange, m.RoutingKey, m.Mandatory = r.exchange, key, true
	m.Headers = broker.ReplayHeaders(got.Headers)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := r.pub.Publish(pctx, m); err != nil {
		_ = got.Requeue()
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("republish %s to %s: %w; it stays in the dead-letter queue", desc, r.exchange, publishHint(err))}
	}
	if err := got.Ack(); err != nil {
		// Published but still in the DLQ: a later replay repeats it, and the
		// consumer's dedupe by event_id makes that harmless.
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("remove %s from the dead-letter queue after its republish: %w", desc, err)}
	}
	r.replayed++
	fmt.Fprintf(r.out, "replayed %s\n", desc)
	return nil
}

func (r *replayer) summary(depth int) string {
	verb := "replayed"
	if r.dryRun {
		verb = "would replay"
	}
	s := fmt.Sprintf("%s %d of %d dead-lettered messages to %s", verb, r.replayed, depth, r.exchange)
	if r.skipped > 0 {
		s += fmt.Sprintf("; %d skipped (left in %s)", r.skipped, r.queue)
	}
	return s
}

// publishHint adds what an operator can do about a publish error.
func publishHint(err error) error {
	switch {
	case errors.Is(err, broker.ErrReturned):
		return fmt.Errorf("%w: no queue is bound for that routing key (is the topology declared? `mailsvc serve` declares it)", err)
	case errors.Is(err, broker.ErrChannelClosed):
		return fmt.Errorf("%w: does the exchange exist? (`mailsvc serve` declares it)", err)
	}
	return err
}
