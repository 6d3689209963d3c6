package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func newAuditCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "The audit log of operator actions (CLI, console, API): who, when, what, why, the result"}
	cmd.AddCommand(newAuditListCmd(e))
	return cmd
}

func newAuditListCmd(e *env) *cobra.Command {
	var q store.AuditQuery
	var mailKey, since string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--mail KEY] [--actor A] [--action X] [--target T] [--since T] [--limit N] [--json]",
		Short: "List operator actions, newest first",
		Example: "  mailsvc audit list --mail order-confirmed:42\n" +
			"  mailsvc audit list --actor ann --since 24h --json",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if mailKey != "" {
				k, err := operator.Key(mailKey)
				if err != nil {
					return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--mail: %w", err)}
				}
				q.DedupeKey = k
			}
			if q.Action != "" && !slices.Contains(store.AuditActions, q.Action) {
				return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--action: no action %q: one of %s", q.Action, strings.Join(store.AuditActions, ", "))}
			}
			var err error
			if q.Since, err = parseWhen(since, time.Now()); err != nil {
				return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--since: %w", err)}
			}
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				list, err := st.ListAudit(e.ctx, q)
				if errors.Is(err, store.ErrBadQuery) {
					return &ExitError{Code: ExitInvalid, Err: err}
				}
				if err != nil {
					return storeError(cfg, "", err)
				}
				if asJSON {
					return writeJSON(e.stdout, append([]store.AuditEntry{}, list...))
				}
				return writeAudit(e.stdout, list)
			})
		},
	}
	cmd.Flags().StringVar(&mailKey, "mail", "", "only the actions on the mail with this dedupe key")
	cmd.Flags().StringVar(&q.Actor, "actor", "", "only this actor's actions")
	cmd.Flags().StringVar(&q.Action, "action", "", "only this action: "+strings.Join(store.AuditActions, ", "))
	cmd.Flags().StringVar(&q.Target, "target", "", "only the actions on this target (a key, an address, a provider, a queue)")
	cmd.Flags().StringVar(&since, "since", "", "only actions at or after T: a duration ago (24h) or a time (2026-12-06T10:00:00Z, 2026-12-06)")
	cmd.Flags().IntVar(&q.Limit, "limit", 50, fmt.Sprintf("at most this many entries (1..%d)", store.MaxAuditPage))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {id, at, actor, via, action, target, dedupe_key, reason, result, detail}")
	return cmd
}

// writeAudit prints entries as a table; an entry without a reason reads
// "(no reason given)", a started one store.AuditResultUnknown.
func writeAudit(w io.Writer, entries []store.AuditEntry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no operator action recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tVIA\tACTION\tTARGET\tRESULT\tREASON\tDETAIL")
	for _, a := range entries {
		reason := a.Reason
		if reason == "" {
			reason = "(no reason given)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", operator.Stamp(&a.At), oneLine(a.Actor), a.Via, a.Action, oneLine(a.Target),
			store.AuditResultText(a.Result), oneLine(reason), oneLine(a.Detail))
	}
	return tw.Flush()
}

// oneLine is s with its runs of white space (tabs and line breaks
// included) made one space, so a cell never breaks the table.
// oneLine is s on one line for the table, with white space runs as one
// space and every other control character escaped (\x1b): a text stored
// before the input rules refused them cannot rewrite the terminal.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
