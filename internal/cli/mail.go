package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Exit codes of the operator commands (2 is an invalid config, 1 anything
// else); docs/operating.md lists them.
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

// operatorBroker is the broker connection of an operator command (emit,
// dlq replay): the daemon's amqp.url and amqp.tls_* (app.BrokerConfig),
// dialled within connectTimeout.
func operatorBroker(cfg *config.Config, name string) broker.Config {
	c := app.BrokerConfig(cfg, name)
	c.DialTimeout = connectTimeout
	return c
}

func newMailCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "mail", Short: "Inspect and act on mails: show, list, resend, reconcile, release, cancel-held"}
	cmd.AddCommand(newMailShowCmd(e), newMailListCmd(e), newMailResendCmd(e), newMailReconcileCmd(e),
		newMailReleaseCmd(e), newMailCancelHeldCmd(e))
	return cmd
}

// openStore connects to the database of cfg and checks the schema.
func (e *env) openStore(cfg *config.Config) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(e.ctx, connectTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: cfg.Database.URL.Reveal(), MaxConns: 2, EventsExchange: cfg.AMQP.EventsExchange,
		DeliveryConfirm: app.DeliveryConfirm(cfg)})
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
				return writeMails(e.stdout, mails, states, cfg.Mail.DeliveryConfirmAfter)
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

func writeMails(w io.Writer, mails []store.MailView, states []store.ProviderState, confirmAfter time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, m := range mails {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		writeMail(tw, m, states, confirmAfter)
	}
	return tw.Flush()
}

// writeMail prints the report of m (operator.MailReport) as aligned
// "name: value" lines, then, for a mail that waits, the providers that are
// paused (operator.PausedProviders), and for a sent mail without a
// delivery report after confirmAfter (mail.delivery_confirm_after), that
// (operator.DeliveryUnconfirmed).
func writeMail(w io.Writer, m store.MailView, states []store.ProviderState, confirmAfter time.Duration) {
	now := time.Now()
	fields := append(operator.MailReport(m, now), operator.PausedProviders(m, states)...)
	for _, f := range append(fields, operator.DeliveryUnconfirmed(m, confirmAfter, now)...) {
		fmt.Fprintf(w, "%s:\t%s\n", f.Name, f.Value)
	}
}

func newMailListCmd(e *env) *cobra.Command {
	var f store.MailFilter
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list --status unknown|failed|pending|sending|held | --unconfirmed [--older-than D] [--template T] [--limit N] [--json]",
		Short: "List the mails of one status, oldest change first, or the sent mails whose delivery is unconfirmed, oldest send first",
		Example: "  mailsvc mail list --status unknown --older-than 1h\n" +
			"  mailsvc mail list --status failed --template order_confirmed --limit 500 --json\n" +
			"  mailsvc mail list --unconfirmed --json",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			f.Status = mailtype.Status(status)
			if err := checkListFlags(f); err != nil {
				return err
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				mails, more, err := st.ListMails(e.ctx, f)
				if errors.Is(err, store.ErrUnconfirmedOff) {
					return &ExitError{Code: 1, Err: fmt.Errorf("%w (mail.delivery_confirm_after is %s; resend reports with webhooks.resend_secret set, smtp with bounces.address and SUCCESS in bounces.notify)",
						store.ErrUnconfirmedOff, cfg.Mail.DeliveryConfirmAfter)}
				}
				if err != nil {
					return storeError(cfg, "", err)
				}
				if more {
					fmt.Fprintf(e.stderr, "showing the first %d; more match (raise --limit, or narrow with --older-than or --template)\n", f.Limit)
				}
				if asJSON {
					return writeJSON(e.stdout, append([]store.MailSummary{}, mails...))
				}
				return writeMailList(e.stdout, mails)
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "unknown, failed, pending, sending or held (this or --unconfirmed)")
	cmd.Flags().BoolVar(&f.Unconfirmed, "unconfirmed", false, "sent mails with no delivery or bounce report after mail.delivery_confirm_after")
	cmd.Flags().DurationVar(&f.OlderThan, "older-than", 0, "only mails whose row last changed (with --unconfirmed: that were sent) at least this long ago (e.g. 30m, 1h, 48h)")
	cmd.Flags().StringVar(&f.Template, "template", "", "only mails of this template (order_confirmed, order_cancelled)")
	cmd.Flags().IntVar(&f.Limit, "limit", 100, "at most this many mails")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.MarkFlagsOneRequired("status", "unconfirmed")
	cmd.MarkFlagsMutuallyExclusive("status", "unconfirmed")
	return cmd
}

// checkListFlags returns the exit error of invalid `mail list` flags.
func checkListFlags(f store.MailFilter) error {
	if !f.Unconfirmed && !slices.Contains(store.ListableStatuses, f.Status) {
		return &ExitError{Code: 1, Err: fmt.Errorf("--status must be one of %v, got %q (sent and cancelled mails are not listed; --unconfirmed lists the sent ones without a delivery report)", store.ListableStatuses, f.Status)}
	}
	if f.Limit <= 0 || f.OlderThan < 0 {
		return &ExitError{Code: 1, Err: errors.New("--limit must be positive and --older-than not negative")}
	}
	return nil
}

func writeMailList(w io.Writer, mails []store.MailSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(operator.ListHeader, "\t"))
	now := time.Now()
	for _, m := range mails {
		fmt.Fprintln(tw, strings.Join(operator.ListRow(m, now), "\t"))
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
	var delivered, notDelivered, dryRun bool
	var from string
	cmd := &cobra.Command{
		Use:   "reconcile KEY|--from FILE --delivered|--not-delivered [--dry-run]",
		Short: "Settle unknown mails: --delivered makes them sent (+EmailSent), --not-delivered sends them again",
		Long: "Settle one unknown mail (KEY) or every key of FILE (one dedupe key a line, # comments; - reads stdin),\n" +
			"each in its own transaction, printing one line per key. With --from it goes on past a key that is\n" +
			"not found or not unknown, stops at a database failure, and exits non-zero when any key was not\n" +
			"reconciled (5 the database failed, else 4 a mail was not unknown, else 3 a key was not found).",
		Example: "  mailsvc mail reconcile order-confirmed:42 --delivered\n" +
			"  mailsvc mail list --status unknown --json | jq -r '.[].dedupe_key' > keys.txt\n" +
			"  mailsvc mail reconcile --from keys.txt --not-delivered --dry-run",
		Args: func(_ *cobra.Command, args []string) error {
			if (len(args) == 1) == (from != "") || len(args) > 1 {
				return errors.New("give exactly one dedupe key, or --from FILE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			keys := args
			if from != "" {
				var err error
				if keys, err = readKeyFile(cmd.InOrStdin(), from); err != nil {
					return err
				}
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				if from == "" {
					return reconcileOneKey(e, cfg, st, keys[0], delivered, dryRun)
				}
				return reconcileKeys(e, cfg, st, keys, delivered, dryRun)
			})
		},
	}
	cmd.Flags().BoolVar(&delivered, "delivered", false, "the provider or the customer confirms the mail arrived")
	cmd.Flags().BoolVar(&notDelivered, "not-delivered", false, "the mail did not arrive: send it again")
	cmd.Flags().StringVar(&from, "from", "", "reconcile every dedupe key of this file, one a line (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would happen to each mail and change nothing")
	cmd.MarkFlagsMutuallyExclusive("delivered", "not-delivered")
	cmd.MarkFlagsOneRequired("delivered", "not-delivered")
	return cmd
}

// reconcileOneKey is `mail reconcile KEY`: one line, or the key's error
// with its exit code.
func reconcileOneKey(e *env, cfg *config.Config, st *store.Store, key string, delivered, dryRun bool) error {
	var err error
	operator.ReconcileKeys(e.ctx, st, []string{key}, delivered, dryRun, func(r operator.KeyResult) {
		if r.Err != nil {
			err = storeError(cfg, key, r.Err)
			return
		}
		_, err = fmt.Fprintln(e.stdout, operator.ReconcileLine(r, dryRun))
	})
	return err
}

// reconcileKeys is `mail reconcile --from FILE`: one line per key on
// stdout, a summary on stderr, and the exit code of the worst failure.
func reconcileKeys(e *env, cfg *config.Config, st *store.Store, keys []string, delivered, dryRun bool) error {
	var writeErr error
	sum := operator.ReconcileKeys(e.ctx, st, keys, delivered, dryRun, func(r operator.KeyResult) {
		if _, err := fmt.Fprintln(e.stdout, operator.ReconcileLine(r, dryRun)); err != nil && writeErr == nil {
			writeErr = err
		}
	})
	if writeErr != nil {
		return writeErr
	}
	verb := "reconciled"
	if dryRun {
		verb = "would reconcile"
	}
	fmt.Fprintf(e.stderr, "%s %d of %d keys (%d not found, %d refused, %d failed, %d not attempted, %d duplicates)\n",
		verb, sum[operator.Reconciled], len(keys), sum[operator.NotFound], sum[operator.Refused], sum[operator.Failed],
		sum[operator.Skipped], sum[operator.Duplicate])
	if sum.OK() {
		return nil
	}
	code := ExitNotFound
	switch {
	case sum[operator.Failed] > 0:
		code = ExitUnavailable
	case sum[operator.Refused] > 0:
		code = ExitRefused
	}
	return &ExitError{Code: code, Err: fmt.Errorf("%d of %d keys were not reconciled (see the lines above; database %s)",
		len(keys)-sum[operator.Reconciled]-sum[operator.Duplicate], len(keys), cfg.Database.URL)}
}

// readKeyFile reads the keys of `--from FILE` ("-" is stdin).
func readKeyFile(stdin io.Reader, path string) ([]string, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from: %w", err)}
		}
		defer f.Close()
		r = f
	}
	keys, err := operator.ReadKeys(r)
	if err != nil {
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from %s: %w", path, err)}
	}
	if len(keys) == 0 {
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from %s: no dedupe key in it (one a line)", path)}
	}
	return keys, nil
}
