package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

func newOutboxCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "outbox", Short: "Show, revive and republish feedback events: list, replay, republish"}
	cmd.AddCommand(newOutboxListCmd(e), newOutboxReplayCmd(e), newOutboxRepublishCmd(e))
	return cmd
}

func newOutboxListCmd(e *env) *cobra.Command {
	var dead, asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:     "list [--dead] [--json] [--limit N]",
		Short:   "List unpublished outbox rows, oldest first: waiting, retrying (with their last error) or dead",
		Example: "  mailsvc outbox list --dead\n  mailsvc outbox list --json --limit 0",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return errors.New("--limit must be >= 0")
			}
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				rows, err := st.ListOutbox(e.ctx, dead, limit)
				if err != nil {
					return outboxError(cfg, err)
				}
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rows)
				}
				return writeOutbox(e.stdout, rows, dead, limit)
			})
		},
	}
	cmd.Flags().BoolVar(&dead, "dead", false, "only the dead rows (the relay gave up on them)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most N rows (0: all)")
	return cmd
}

func newOutboxReplayCmd(e *env) *cobra.Command {
	var dead bool
	var limit int
	cmd := &cobra.Command{
		Use:   "replay [--dead] [--limit N]",
		Short: "Hand unpublished outbox rows back to the relay: --dead revives dead rows, else rows waiting out a retry go now",
		Long: `Hands unpublished outbox rows back to the relay, oldest first. Fix the cause first (most
often a queue that should be bound to amqp.events_exchange; see the row's last_error in
` + "`mailsvc outbox list --dead`" + `).

With --dead, dead rows become alive again, due now, with their attempts back to 0, so the
relay retries each up to relay.max_attempts times more. Without it, rows that wait out a
retry backoff (a nack, an unroutable return) are made due now; their attempts stay counted.
A revived event reaches mail.events after the events of its order that went out while it
was dead; its occurred_at tells the order.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return errors.New("--limit must be >= 0")
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				rows, err := st.ReplayOutbox(e.ctx, dead, limit)
				if err != nil {
					return outboxError(cfg, err)
				}
				return writeReplayed(e.stdout, rows, dead, cfg.Relay.PollInterval)
			})
		},
	}
	cmd.Flags().BoolVar(&dead, "dead", false, "revive dead rows (else: make rows waiting for a retry due now)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most N rows, oldest first (0: all)")
	return cmd
}

// outboxError maps a store error of an outbox command to an exit code.
func outboxError(cfg *config.Config, err error) error {
	if mailtype.ReasonOf(err) == mailtype.ReasonDatabase {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s: %w", cfg.Database.URL, err)}
	}
	return err
}

// outboxState is a row's state as list prints it.
func outboxState(r store.OutboxEntry) string {
	switch {
	case r.DeadAt != nil:
		return "dead"
	case r.Attempts > 0:
		return "retrying"
	default:
		return "waiting"
	}
}

func writeOutbox(w io.Writer, rows []store.OutboxEntry, dead bool, limit int) error {
	what := "unpublished outbox rows"
	if dead {
		what = "dead outbox rows"
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "no %s\n", what)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEVENT\tDEDUPE_KEY\tCREATED\tATTEMPTS\tNEXT_OR_DEAD_AT\tLAST_ERROR")
	for _, r := range rows {
		when := r.NextAttemptAt
		if r.DeadAt != nil {
			when = *r.DeadAt
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, outboxState(r), r.EventType, orDash(r.DedupeKey),
			r.CreatedAt.UTC().Format(time.RFC3339), r.Attempts, when.UTC().Format(time.RFC3339), orDash(r.LastError))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if limit > 0 && len(rows) == limit {
		more = " (the first ones only: --limit 0 lists all)"
	}
	_, err := fmt.Fprintf(w, "%d %s%s\n", len(rows), what, more)
	return err
}

func writeReplayed(w io.Writer, rows []store.OutboxEntry, dead bool, poll time.Duration) error {
	verb, none := "due now", "no outbox row waits for a retry"
	if dead {
		verb, none = "revived", "no dead outbox rows"
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, none)
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s outbox row %d: %s %s (event_id %s)\n", verb, r.ID, r.EventType, orDash(r.DedupeKey), r.EventID)
	}
	_, err := fmt.Fprintf(w, "%d outbox rows %s; the relay leader publishes them within relay.poll_interval (%s); follow with `mailsvc outbox list`\n",
		len(rows), verb, poll)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
