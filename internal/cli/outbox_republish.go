package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
)

// republishOptions are the flags of `outbox republish`.
type republishOptions struct {
	orders       []string
	ordersFrom   string
	since, until string
	types        []string
	rate         float64
	dryRun       bool
}

// dryRunShown is how many events a dry run lists.
const dryRunShown = 10

func newOutboxRepublishCmd(e *env) *cobra.Command {
	var o republishOptions
	var af actorFlags
	cmd := &cobra.Command{
		Use:   "republish [--order ID]... [--orders-from FILE] [--since T] [--until T] [--type T,...] [--rate N] [--dry-run]",
		Short: "Publish again feedback events already published (kept for retention.window), with their own event ids",
		Long: `Publishes again, to the exchange each went to, the feedback events the relay published and
the outbox still keeps (retention.window after their publication), in the order they were
written: each order's events arrive in their first order. Each message is the one published
first (same message_id = event_id, same body), with the header x-mailsvc-republish: true and
x-mailsvc-original-published-at; a consumer that dedupes on event_id takes it once. Use it
to rebuild an order service's mail-status projection. At least one of --order, --orders-from,
--since, --until, --type is required; they narrow the selection together. --since and
--until bound the publication time: RFC 3339, or a duration meaning that long ago (24h).
Each batch is confirmed by the broker before the next; one audit row per run.`,
		Example: "  mailsvc outbox republish --order 42 --order 43 --dry-run\n" +
			"  mailsvc outbox republish --orders-from lost.txt --type EmailSent,EmailFailed --reason 'INC-12 projection wiped'\n" +
			"  mailsvc outbox republish --since 2026-05-01T10:00:00Z --until 2026-05-01T12:00:00Z --rate 200",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.rate <= 0 {
				return &ExitError{Code: ExitInvalid, Err: errors.New("--rate must be > 0")}
			}
			req, err := o.request(cmd.InOrStdin(), time.Now())
			if err != nil {
				return err
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				req.KeptFor = cfg.Retention.Window
				return republish(e, cfg, st, req, o, af)
			})
		},
	}
	af.bind(cmd, "why, for the audit log")
	f := cmd.Flags()
	f.StringArrayVar(&o.orders, "order", nil, "an order id (repeat for more)")
	f.StringVar(&o.ordersFrom, "orders-from", "", `a file of order ids, one a line ("-": stdin; # comments)`)
	f.StringVar(&o.since, "since", "", "published at or after T (RFC 3339, or a duration ago: 24h)")
	f.StringVar(&o.until, "until", "", "published before T (RFC 3339, or a duration ago)")
	f.StringSliceVar(&o.types, "type", nil, "event types, comma-separated (EmailSent,EmailFailed,...)")
	f.Float64Var(&o.rate, "rate", 50, "at most N messages per second")
	f.BoolVar(&o.dryRun, "dry-run", false, "count and list the first events; publish nothing")
	return cmd
}

// request builds the operator request of o, reading --orders-from.
func (o republishOptions) request(stdin io.Reader, now time.Time) (operator.RepublishRequest, error) {
	r := operator.RepublishRequest{OrderIDs: o.orders, Types: o.types}
	var err error
	if r.Since, err = pointInTime("--since", o.since, now); err != nil {
		return r, err
	}
	if r.Until, err = pointInTime("--until", o.until, now); err != nil {
		return r, err
	}
	if o.ordersFrom != "" {
		lines, err := readOrderFile(stdin, "--orders-from", o.ordersFrom)
		if err != nil {
			return r, err
		}
		for _, l := range lines {
			r.OrderIDs = append(r.OrderIDs, l.OrderID)
		}
	}
	return r, nil
}

// pointInTime reads an RFC 3339 time, or a duration meaning that long
// before now; "" is the zero time.
func pointInTime(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%s %q: not an RFC 3339 time (2026-05-01T10:00:00Z) nor a positive duration (24h)", flag, s)}
}

// readOrderFile reads the orders of a --from style flag ("-" is stdin);
// a bad line refuses the file (ExitInvalid), naming the line.
func readOrderFile(stdin io.Reader, flag, path string) ([]operator.OrderLine, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &ExitError{Code: 1, Err: fmt.Errorf("%s: %w", flag, err)}
		}
		defer f.Close()
		r = f
	}
	lines, err := operator.ReadOrderLines(r)
	var ie *operator.InputError
	switch {
	case errors.As(err, &ie):
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%s %s: %w; nothing was done", flag, path, err)}
	case err != nil:
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("%s %s: %w", flag, path, err)}
	case len(lines) == 0:
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%s %s: no order id in it (one a line)", flag, path)}
	}
	return lines, nil
}

// republish runs the action, publishing on a connection opened only when
// there is something to publish, and prints the result.
func republish(e *env, cfg *config.Config, st *store.Store, req operator.RepublishRequest, o republishOptions, af actorFlags) error {
	publish := func(ctx context.Context, events []store.PublishedEvent) (int, error) {
		return republishEvents(ctx, e.stdout, cfg, events, o.rate)
	}
	res, events, err := actions(cfg, st).Republish(e.ctx, af.who(), req, af.reason, o.dryRun, publish)
	if o.dryRun && err == nil {
		for _, ev := range events[:min(len(events), dryRunShown)] {
			fmt.Fprintf(e.stdout, "would republish %s\n", eventLine(ev))
		}
		if len(events) > dryRunShown {
			fmt.Fprintf(e.stdout, "... and %d more\n", len(events)-dryRunShown)
		}
	}
	if res.Summary != "" {
		fmt.Fprintln(e.stdout, res.Summary)
	}
	return actionError(cfg, err)
}

func eventLine(ev store.PublishedEvent) string {
	return fmt.Sprintf("%s event_id=%s order_id=%s dedupe_key=%s published_at=%s", ev.EventType, ev.EventID,
		orDash(ev.OrderID), orDash(ev.DedupeKey), ev.PublishedAt.UTC().Format(time.RFC3339))
}

// republishEvents publishes events again (relay.Republish), one line per
// confirmed event when there are few.
func republishEvents(ctx context.Context, out io.Writer, cfg *config.Config, events []store.PublishedEvent, rate float64) (int, error) {
	conn, err := broker.Dial(operatorBroker(cfg, "mailsvc-outbox-republish"))
	if err != nil {
		return 0, &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("%w (check amqp.url and amqp.tls_*, or start RabbitMQ)", err)}
	}
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		return 0, &ExitError{Code: ExitUnavailable, Err: err}
	}
	defer pub.Close()
	report := func(ev store.PublishedEvent) {
		if len(events) <= dryRunShown {
			fmt.Fprintf(out, "republished %s\n", eventLine(ev))
		}
	}
	n, err := relay.Republish(ctx, pub, events, relay.RepublishOptions{Rate: rate, ConfirmTimeout: 30 * time.Second, Report: report})
	if err != nil {
		return n, &ExitError{Code: ExitUnavailable, Err: err}
	}
	return n, nil
}
