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

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Exit codes of the operator commands (ExitInvalid, 2: an invalid config,
// or input that cannot mean anything, such as a key that is not UTF-8; 1
// anything else); docs/operating.md lists them.
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
		RecipientLimit:  app.RecipientLimit(cfg),
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
	return e.runWithStore(cfg, fn)
}

// withReadStore is withStore for a command that only reads: it needs
// database.url alone (config.LoadReadOnly).
func (e *env) withReadStore(fn func(*config.Config, *store.Store) error) error {
	cfg, err := e.loadReadOnly()
	if err != nil {
		return err
	}
	return e.runWithStore(cfg, fn)
}

func (e *env) runWithStore(cfg *config.Config, fn func(*config.Config, *store.Store) error) error {
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
	case errors.Is(err, store.ErrBadQuery):
		return &ExitError{Code: ExitInvalid, Err: err}
	case mailtype.ReasonOf(err) == mailtype.ReasonDatabase:
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s: %w", cfg.Database.URL, err)}
	}
	return err
}

func newMailShowCmd(e *env) *cobra.Command {
	var orderID string
	var asJSON, body bool
	cmd := &cobra.Command{
		Use:   "show [KEY] [--order ID] [--body] [--json]",
		Short: "Show a mail (by dedupe key) or every mail of an order: status, attempts, times, errors, feedback events; --body: the mail as sent",
		Example: "  mailsvc mail show order-confirmed:42\n  mailsvc mail show --order 42 --json\n" +
			"  mailsvc mail show order-confirmed:42 --body",
		Args: func(_ *cobra.Command, args []string) error {
			if (len(args) == 1) == (orderID != "") || len(args) > 1 {
				return errors.New("give exactly one dedupe key, or --order ID")
			}
			if body && orderID != "" {
				return errors.New("--body shows one mail: give its dedupe key, not --order")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			args, err := showArgs(args)
			if err != nil {
				return err
			}
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				if body {
					return showBody(e, cfg, st, args[0], asJSON)
				}
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
				return writeMails(e.stdout, mails, states, cfg)
			})
		},
	}
	cmd.Flags().StringVar(&orderID, "order", "", "show every mail of this order id (confirmation, resends, tombstones)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (an object for a key, an array for --order)")
	cmd.Flags().BoolVar(&body, "body", false, "print the stored rendered mail: headers, text part, HTML part")
	return cmd
}

// showArgs normalises the key of `mail show` (operator.Key); a key that
// cannot be one exits ExitInvalid, before any database is asked.
func showArgs(args []string) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	k, err := operator.Key(args[0])
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%w; no mail can have it", err)}
	}
	return []string{k}, nil
}

// showBody prints the rendered mail key as stored and sent
// (store.MailContentByKey): its headers, then each part under a line
// naming it; or its JSON.
func showBody(e *env, cfg *config.Config, st *store.Store, key string, asJSON bool) error {
	c, err := st.MailContentByKey(e.ctx, key)
	if err != nil {
		return storeError(cfg, key, err)
	}
	if asJSON {
		return writeJSON(e.stdout, c)
	}
	to := c.To
	if c.ToName != "" {
		to = c.ToName + " <" + c.To + ">"
	}
	var b strings.Builder
	for _, h := range [][2]string{{"From", c.From}, {"To", to}, {"Reply-To", c.ReplyTo}, {"Subject", c.Subject}, {"Message-ID", c.MessageID}} {
		if h[1] != "" {
			fmt.Fprintf(&b, "%s: %s\n", h[0], h[1])
		}
	}
	fmt.Fprintf(&b, "\n--- text/plain ---\n%s\n", strings.TrimRight(c.Text, "\n"))
	if c.HTML != "" {
		fmt.Fprintf(&b, "--- text/html ---\n%s\n", strings.TrimRight(c.HTML, "\n"))
	}
	_, err = io.WriteString(e.stdout, b.String())
	return err
}

func showMails(ctx context.Context, st *store.Store, args []string, orderID string) ([]store.MailView, error) {
	if orderID == "" {
		m, err := st.MailByKey(ctx, args[0])
		return []store.MailView{m}, err
	}
	orderID, err := operator.OrderID(orderID)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--order: %w", err)}
	}
	mails, err := st.MailsByOrder(ctx, orderID)
	if err == nil && len(mails) == 0 {
		return nil, &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no mail for order %q: the event may not have arrived (check the dead-letter queue with `mailsvc dlq list`)", orderID)}
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

func writeMails(w io.Writer, mails []store.MailView, states []store.ProviderState, cfg *config.Config) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, m := range mails {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		writeMail(tw, m, states, cfg.Mail.DeliveryConfirmAfter, cfg.Retention.Window)
	}
	return tw.Flush()
}

// writeMail prints the report of m (operator.MailReport) as aligned
// "name: value" lines, then, for a mail that waits, the providers that are
// paused (operator.PausedProviders), and for a sent mail without a
// delivery report after confirmAfter (mail.delivery_confirm_after), that
// (operator.DeliveryUnconfirmed), and until when its published feedback
// events can be republished, kept for keptFor (operator.RepublishFields).
func writeMail(w io.Writer, m store.MailView, states []store.ProviderState, confirmAfter, keptFor time.Duration) {
	now := time.Now()
	fields := append(operator.MailReport(m, now), operator.RepublishFields(m, keptFor, now)...)
	fields = append(fields, operator.PausedProviders(m, states)...)
	for _, f := range append(fields, operator.DeliveryUnconfirmed(m, confirmAfter, now)...) {
		fmt.Fprintf(w, "%s:\t%s\n", f.Name, f.Value)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
