package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Exit codes of the operator commands (2 is an invalid config, 1 anything
// else); README "Operating" lists them.
const (
	// ExitNotFound: the key, order or queue does not exist.
	ExitNotFound = 3
	// ExitRefused: the state of the mail does not allow the action.
	ExitRefused = 4
	// ExitUnavailable: the database or the broker cannot be reached, or the
	// schema is behind.
	ExitUnavailable = 5
)

// connectTimeout bounds connecting to a server from an operator command.
const connectTimeout = 15 * time.Second

func newMailCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "mail", Short: "Inspect and act on mails: show, resend, reconcile"}
	cmd.AddCommand(newMailShowCmd(e), newMailResendCmd(e), newMailReconcileCmd(e))
	return cmd
}

// openStore connects to the database of cfg and checks the schema.
func (e *env) openStore(cfg *config.Config) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(e.ctx, connectTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: cfg.Database.URL.Reveal(), MaxConns: 2, EventsExchange: cfg.AMQP.EventsExchange})
	if err != nil {
		return nil, &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s is unreachable: %w (check database.url, or start PostgreSQL)", cfg.Database.URL, err)}
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, &ExitError{Code: ExitUnavailable, Err: err}
	}
	return st, nil
}

// withStore loads the config, opens the store (schema checked) and runs fn.
func (e *env) withStore(fn func(*config.Config, *store.Store) error) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	st, err := e.openStore(cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(cfg, st)
}

// storeError maps a store error to an actionable *ExitError.
func storeError(cfg *config.Config, key string, err error) error {
	var se *store.StateError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no mail has dedupe key %q (list an order's mails with `mailsvc mail show --order ID`)", key)}
	case errors.As(err, &se):
		return &ExitError{Code: ExitRefused, Err: se}
	case mailtype.ReasonOf(err) == mailtype.ReasonDatabase:
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s: %w", cfg.Database.URL, err)}
	}
	return err
}

func newMailShowCmd(e *env) *cobra.Command {
	var orderID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show [KEY] [--order ID]",
		Short:   "Show a mail (by dedupe key) or every mail of an order: status, attempts, times, errors, feedback events",
		Example: "  mailsvc mail show order-confirmed:42\n  mailsvc mail show --order 42 --json",
		Args: func(_ *cobra.Command, args []string) error {
			if (len(args) == 1) == (orderID != "") || len(args) > 1 {
				return errors.New("give exactly one dedupe key, or --order ID")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				mails, err := showMails(e.ctx, st, args, orderID)
				if err != nil {
					return storeError(cfg, strings.Join(args, ""), err)
				}
				if asJSON {
					return writeMailsJSON(e.stdout, mails, orderID == "")
				}
				// Why a waiting mail waits, when a provider is paused; a
				// failed read leaves that out of the report.
				states, _ := st.ProviderStates(e.ctx)
				return writeMails(e.stdout, mails, states)
			})
		},
	}
	cmd.Flags().StringVar(&orderID, "order", "", "show every mail of this order id (confirmation, resends, tombstones)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (an object for a key, an array for --order)")
	return cmd
}

func showMails(ctx context.Context, st *store.Store, args []string, orderID string) ([]store.MailView, error) {
	if orderID == "" {
		m, err := st.MailByKey(ctx, args[0])
		return []store.MailView{m}, err
	}
	mails, err := st.MailsByOrder(ctx, orderID)
	if err == nil && len(mails) == 0 {
		return nil, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no mail for order %q: the event may not have arrived (check the dead-letter queue with `mailsvc dlq replay --dry-run`)", orderID)}
	}
	return mails, err
}

func writeMailsJSON(w io.Writer, mails []store.MailView, single bool) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if single {
		return enc.Encode(mails[0])
	}
	return enc.Encode(mails)
}

func writeMails(w io.Writer, mails []store.MailView, states []store.ProviderState) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, m := range mails {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		writeMail(tw, m, states)
	}
	return tw.Flush()
}

// writeMail prints the report of m (operator.MailReport) as aligned
// "name: value" lines, and, for a mail that waits, the providers that are
// paused (operator.PausedProviders).
func writeMail(w io.Writer, m store.MailView, states []store.ProviderState) {
	for _, f := range append(operator.MailReport(m, time.Now()), operator.PausedProviders(m, states)...) {
		fmt.Fprintf(w, "%s:\t%s\n", f.Name, f.Value)
	}
}

func newMailResendCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "resend KEY",
		Short: "Send a new copy of a sent or failed mail as KEY:resend:N; the original row is never changed",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				ns, err := st.IdempotencyNamespace(e.ctx, cfg.Mail.IdempotencyNamespace)
				if err != nil {
					return storeError(cfg, args[0], err)
				}
				newKey, err := st.Resend(e.ctx, args[0], mailtype.AddressDomain(cfg.Mail.From), ns)
				if err != nil {
					return storeError(cfg, args[0], err)
				}
				_, err = fmt.Fprintf(e.stdout, "created %s (pending) as a copy of %s; follow it with `mailsvc mail show %s`\n", newKey, args[0], newKey)
				return err
			})
		},
	}
}

func newMailReconcileCmd(e *env) *cobra.Command {
	var delivered, notDelivered bool
	cmd := &cobra.Command{
		Use:   "reconcile KEY --delivered|--not-delivered",
		Short: "Settle an unknown mail: --delivered makes it sent (+EmailSent), --not-delivered sends it again",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				res, err := st.Reconcile(e.ctx, args[0], delivered)
				if err != nil {
					return storeError(cfg, args[0], err)
				}
				msg := fmt.Sprintf("%s is now %s", args[0], res.Status)
				if res.Feedback != "" {
					msg += "; " + string(res.Feedback) + " written to the outbox"
				}
				if res.Status == mailtype.StatusPending {
					msg += "; a sender will attempt it again now"
				}
				_, err = fmt.Fprintln(e.stdout, msg)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&delivered, "delivered", false, "the provider or the customer confirms the mail arrived")
	cmd.Flags().BoolVar(&notDelivered, "not-delivered", false, "the mail did not arrive: send it again")
	cmd.MarkFlagsMutuallyExclusive("delivered", "not-delivered")
	cmd.MarkFlagsOneRequired("delivered", "not-delivered")
	return cmd
}
