package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func newSuppressionCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "suppression",
		Short: "The suppression list: addresses no mail is sent to (list, show, add, remove)",
		Long: "A mail to an address on the suppression list ends failed with reason suppressed (EmailFailed) and is\n" +
			"never handed to the provider. Resend's webhooks add permanent bounces (source webhook/bounce) and spam\n" +
			"complaints (webhook/complaint), repeated transient bounces for a while (webhook/transient); the SMTP\n" +
			"relay's permanent refusals of a recipient add it (smtp/reject); operators add and remove entries here\n" +
			"(source operator). `show` gives an address's history. An address may be given as\n" +
			"'Ann <ann@example.com>' or '<ann@example.com>'; it is compared with surrounding white space (no-break\n" +
			"space too) removed and the domain's letters lower-cased; the local part keeps its case (RFC 5321:\n" +
			"Ann@example.com and ann@example.com may be two mailboxes).",
	}
	cmd.AddCommand(newSuppressionListCmd(e), newSuppressionShowCmd(e), newSuppressionAddCmd(e), newSuppressionRemoveCmd(e))
	return cmd
}

func newSuppressionListCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List every suppressed address with its source, time and reason, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				list, err := st.Suppressions(e.ctx)
				if err != nil {
					return storeError(cfg, "", err)
				}
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					if list == nil {
						list = []store.Suppression{}
					}
					return enc.Encode(list)
				}
				return writeSuppressions(e.stdout, list)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {address, reason, source, created_at, last_seen, seen, expires_at}")
	return cmd
}

func writeSuppressions(w io.Writer, list []store.Suppression) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no address is suppressed")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tSOURCE\tSINCE\tSEEN\tEXPIRES\tREASON")
	for _, s := range list {
		until := "never"
		if s.ExpiresAt != nil {
			until = operator.Stamp(s.ExpiresAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.Address, s.Source, operator.Stamp(&s.CreatedAt), s.Seen, until, s.Reason)
	}
	return tw.Flush()
}

func newSuppressionShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ADDRESS [--json]",
		Short: "An address's entry (if listed) and history: every report that named it, its transient bounces, its removal",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			addr, err := operator.Address(args[0])
			if err != nil {
				return &ExitError{Code: ExitInvalid, Err: err}
			}
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				h, err := st.SuppressionHistoryOf(e.ctx, addr)
				if errors.Is(err, store.ErrNotFound) {
					return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("%s has never been suppressed nor bounced", addr)}
				}
				if err != nil {
					return storeError(cfg, "", err)
				}
				if asJSON {
					return writeJSON(e.stdout, h)
				}
				return writeSuppressionHistory(e.stdout, h)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {address, entry, events}")
	return cmd
}

func writeSuppressionHistory(w io.Writer, h store.SuppressionHistory) error {
	if h.Entry == nil {
		fmt.Fprintf(w, "%s is not suppressed now\n", h.Address)
	} else if err := writeSuppressions(w, []store.Suppression{*h.Entry}); err != nil {
		return err
	}
	fmt.Fprintln(w, "history:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, ev := range h.Events {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", operator.Stamp(&ev.At), ev.Kind, ev.Source, ev.Reason)
	}
	return tw.Flush()
}

func newSuppressionAddCmd(e *env) *cobra.Command {
	var af actorFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "add ADDRESS --reason R [--actor A] [--dry-run]",
		Short: "Suppress ADDRESS (source operator): its mails end failed, reason suppressed, unsent",
		Example: `  mailsvc suppression add ann@example.com --reason "asked by phone not to be mailed"` + "\n" +
			`  mailsvc suppression add 'Ann <ann@example.com>' --reason "bounces"    # stores ann@example.com`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				return printAction(e, cfg)(actions(cfg, st).Suppress(e.ctx, af.who(), args[0], af.reason, dryRun))
			})
		},
	}
	af.bind(cmd, "why (kept with the entry, at most 200 bytes, and in the audit log)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say whether it is listed already; change nothing")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newSuppressionRemoveCmd(e *env) *cobra.Command {
	var af actorFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "remove ADDRESS [--reason R] [--actor A] [--dry-run]",
		Short: "Take ADDRESS off the list: mails to it are sent again (mails already failed stay failed: `mailsvc mail resend`)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				return printAction(e, cfg)(actions(cfg, st).Unsuppress(e.ctx, af.who(), args[0], af.reason, dryRun))
			})
		},
	}
	af.bind(cmd, "why, for the audit log")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the entry it would remove; change nothing")
	return cmd
}
