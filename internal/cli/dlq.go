package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/store"
)

func newDLQCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect and decide on dead-lettered messages: list, show, replay, skip"}
	cmd.AddCommand(newDLQListCmd(e), newDLQShowCmd(e), newDLQReplayCmd(e), newDLQSkipCmd(e))
	return cmd
}

// replayOptions are the flags of `dlq replay`.
type replayOptions struct {
	limit  int
	rate   float64
	dryRun bool
	ff     filterFlags
}

func newDLQReplayCmd(e *env) *cobra.Command {
	var o replayOptions
	var af actorFlags
	cmd := &cobra.Command{
		Use:   "replay [--error-reason R] [--routing-key K] [--older-than D] [--limit N] [--rate R] [--dry-run] [--reason R] [--actor A]",
		Short: "Move dead-lettered messages back to the input exchange with their original routing key",
		Long: `Moves dead-lettered messages back to amqp.input_exchange, each with its original
routing key, at most --rate messages per second. A message leaves the dead-letter queue only
after the broker confirmed its republish; on any error it stays there. One run handles at most
the messages present when it starts, so a message that is still bad and is dead-lettered again
waits for the next run instead of looping. With filters (--error-reason, --routing-key,
--older-than) only the messages they select are replayed; the others stay in the queue, in order.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if o.rate <= 0 || o.limit < 0 {
				return errors.New("--rate must be > 0 and --limit >= 0")
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				a := actions(cfg, st)
				a.ReplayDLQ = func(ctx context.Context, dryRun bool) (string, error) {
					o := o
					o.dryRun = dryRun
					return replayDLQ(ctx, e.stdout, cfg, o)
				}
				res, err := a.ReplayDeadLettersWhere(e.ctx, af.who(), o.ff.f.String(), af.reason, o.dryRun)
				if res.Summary != "" {
					fmt.Fprintln(e.stdout, res.Summary)
				}
				return actionError(cfg, err)
			})
		},
	}
	af.bind(cmd, "why, for the audit log")
	cmd.Flags().IntVar(&o.limit, "limit", 0, "replay at most N messages (0: every message present at start)")
	cmd.Flags().Float64Var(&o.rate, "rate", 20, "at most R messages per second")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be replayed; change nothing")
	o.ff.bind(cmd, "error-reason")
	return cmd
}

// replayDLQ runs one replay of cfg's dead-letter queue, printing a line
// per message on out, and returns its summary (replaySummary; "" when it
// could not start) and its error with its exit code.
func replayDLQ(ctx context.Context, out io.Writer, cfg *config.Config, o replayOptions) (string, error) {
	conn, err := broker.Dial(operatorBroker(cfg, "mailsvc-dlq-replay"))
	if err != nil {
		return "", &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("%w (check amqp.url and amqp.tls_*, or start RabbitMQ)", err)}
	}
	defer conn.Close()
	r, err := deadletter.NewReplayer(conn, deadletter.ReplayOptions{
		Queue: cfg.AMQP.DeadLetterQueue, Exchange: cfg.AMQP.InputExchange, Limit: o.limit, Rate: o.rate,
		DryRun: o.dryRun, Filter: o.ff.f, ConfirmTimeout: connectTimeout, Report: func(h deadletter.Handled) { printHandled(out, h) },
	})
	if errors.Is(err, broker.ErrNoQueue) {
		return "", &ExitError{Code: ExitNotFound, Err: fmt.Errorf("%w (amqp.dead_letter_queue; `mailsvc serve` declares it)", err)}
	}
	if err != nil {
		return "", replayExit(err)
	}
	defer r.Close() // requeues whatever was read and not removed
	err = r.Run(ctx)
	return replaySummary(r.Result(), o.dryRun, cfg.AMQP.InputExchange, cfg.AMQP.DeadLetterQueue), replayExit(err)
}

// replayExit maps a broker failure of the replay to ExitUnavailable.
func replayExit(err error) error {
	var be *deadletter.BrokerError
	if errors.As(err, &be) {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	return err
}

func printHandled(out io.Writer, h deadletter.Handled) {
	if h.Action == deadletter.Skipped {
		fmt.Fprintf(out, "skip %s: no original routing key in its headers\n", h.Item)
		return
	}
	fmt.Fprintf(out, "%s %s\n", h.Action, h.Item)
}

func replaySummary(r deadletter.Result, dryRun bool, exchange, queue string) string {
	verb := "replayed"
	if dryRun {
		verb = "would replay"
	}
	s := fmt.Sprintf("%s %d of %d dead-lettered messages to %s", verb, r.Replayed, r.Depth, exchange)
	if r.Skipped > 0 {
		s += fmt.Sprintf("; %d skipped (left in %s)", r.Skipped, queue)
	}
	if r.Unmatched > 0 {
		s += fmt.Sprintf("; %d not matching the filter (left in %s, in order)", r.Unmatched, queue)
	}
	return s
}
