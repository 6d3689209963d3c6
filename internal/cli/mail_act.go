package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

func newMailResendCmd(e *env) *cobra.Command {
	var af actorFlags
	var dryRun, notice bool
	cmd := &cobra.Command{
		Use:   "resend KEY [--notice] [--reason R] [--actor A] [--dry-run]",
		Short: "Send a new copy of a sent or failed mail as KEY:resend:N; the original row is never changed",
		Long: `Sends a new copy of a sent or failed mail as KEY:resend:N; the original row is never changed.
With --notice the copy starts with its template's resend notice in the mail's language ("If you
already received this e-mail, please ignore it"), in the text and the HTML part; the copy is
stored once, so each of its attempts sends the same bytes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				a := actions(cfg, st)
				if notice {
					reg, err := templates.New(app.TemplatesOptions(cfg))
					if err != nil {
						return fmt.Errorf("load the templates for --notice (templates.dir): %w", err)
					}
					a.Notices = reg.ResendNotice
				}
				return printAction(e, cfg)(a.ResendWith(e.ctx, af.who(), args[0], af.reason, dryRun, operator.ResendOptions{Notice: notice}))
			})
		},
	}
	af.bind(cmd, "why, for the audit log")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say whether it would be sent and under which key; change nothing")
	cmd.Flags().BoolVar(&notice, "notice", false, `start the copy with "If you already received this e-mail, please ignore it" in its language`)
	return cmd
}

func newMailReconcileCmd(e *env) *cobra.Command {
	var delivered, notDelivered, dryRun bool
	var from string
	var af actorFlags
	cmd := &cobra.Command{
		Use:   "reconcile KEY|--from FILE --delivered|--not-delivered [--reason R] [--actor A] [--dry-run]",
		Short: "Settle unknown mails: --delivered makes them sent (+EmailSent), --not-delivered sends them again",
		Long: "Settle one unknown mail (KEY) or every key of FILE (one dedupe key a line, # comments; - reads stdin),\n" +
			"each in its own transaction, printing one line per key. With --from it goes on past a key that is\n" +
			"not found, not unknown or not a key at all (a line that is not UTF-8: its line number is printed),\n" +
			"stops at a database failure, and exits non-zero when any key was not reconciled (5 the database\n" +
			"failed, else 4 a mail was not unknown, else 3 a key was not found, else 2 a line was not a key).",
		Example: "  mailsvc mail reconcile order-confirmed:42 --delivered --reason \"the provider's log shows it delivered\"\n" +
			"  mailsvc mail list --status unknown --json | jq -r '.[].dedupe_key' > keys.txt\n" +
			"  mailsvc mail reconcile --from keys.txt --not-delivered --dry-run",
		Args: func(_ *cobra.Command, args []string) error {
			if (len(args) == 1) == (from != "") || len(args) > 1 {
				return errors.New("give exactly one dedupe key, or --from FILE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var lines []operator.KeyLine
			if from != "" {
				var err error
				if lines, err = readKeyFile(cmd.InOrStdin(), from); err != nil {
					return err
				}
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				a := actions(cfg, st)
				if from == "" {
					return reconcileOneKey(e, cfg, a, af.who(), args[0], delivered, af.reason, dryRun)
				}
				return reconcileKeys(e, cfg, a.Reconciler(af.who(), af.reason), lines, delivered, dryRun)
			})
		},
	}
	cmd.Flags().BoolVar(&delivered, "delivered", false, "the provider or the customer confirms the mail arrived")
	cmd.Flags().BoolVar(&notDelivered, "not-delivered", false, "the mail did not arrive: send it again")
	cmd.Flags().StringVar(&from, "from", "", "reconcile every dedupe key of this file, one a line (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would happen to each mail and change nothing")
	af.bind(cmd, "why, for the audit log (each key's row)")
	cmd.MarkFlagsMutuallyExclusive("delivered", "not-delivered")
	cmd.MarkFlagsOneRequired("delivered", "not-delivered")
	return cmd
}

// reconcileOneKey is `mail reconcile KEY`: one line, or the key's error
// with its exit code.
func reconcileOneKey(e *env, cfg *config.Config, a *operator.Actions, who operator.Actor, key string, delivered bool, reason string, dryRun bool) error {
	return printAction(e, cfg)(a.Reconcile(e.ctx, who, key, delivered, reason, dryRun))
}

// reconcileKeys is `mail reconcile --from FILE`: one line per key on
// stdout (a line that is not a key: its line number and why), a summary
// on stderr, and the exit code of the worst failure.
func reconcileKeys(e *env, cfg *config.Config, r operator.Reconciler, lines []operator.KeyLine, delivered, dryRun bool) error {
	keys := make([]string, len(lines))
	for i, l := range lines {
		keys[i] = l.Key
	}
	var writeErr error
	i := 0
	sum := operator.ReconcileKeys(e.ctx, r, keys, delivered, dryRun, func(res operator.KeyResult) {
		line := operator.ReconcileLine(res, dryRun)
		if res.Disposition == operator.Invalid {
			line = fmt.Sprintf("line %d: %s", lines[i].Line, line)
		}
		i++
		if _, err := fmt.Fprintln(e.stdout, line); err != nil && writeErr == nil {
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
	notKeys := ""
	if sum[operator.Invalid] > 0 {
		notKeys = fmt.Sprintf(", %d lines not keys", sum[operator.Invalid])
	}
	fmt.Fprintf(e.stderr, "%s %d of %d keys (%d not found, %d refused, %d failed, %d not attempted, %d duplicates%s)\n",
		verb, sum[operator.Reconciled], len(keys), sum[operator.NotFound], sum[operator.Refused],
		sum[operator.Failed], sum[operator.Skipped], sum[operator.Duplicate], notKeys)
	if sum.OK() {
		return nil
	}
	code := ExitInvalid
	switch {
	case sum[operator.Failed] > 0:
		code = ExitUnavailable
	case sum[operator.Refused] > 0:
		code = ExitRefused
	case sum[operator.NotFound] > 0:
		code = ExitNotFound
	}
	return &ExitError{Code: code, Err: fmt.Errorf("%d of %d keys were not reconciled (see the lines above; database %s)",
		len(keys)-sum[operator.Reconciled]-sum[operator.Duplicate], len(keys), cfg.Database.URL)}
}

// readKeyFile reads the keys of `--from FILE` ("-" is stdin).
func readKeyFile(stdin io.Reader, path string) ([]operator.KeyLine, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from: %w", err)}
		}
		defer f.Close()
		r = f
	}
	lines, err := operator.ReadKeyLines(r)
	if err != nil {
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from %s: %w", path, err)}
	}
	if len(lines) == 0 {
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("--from %s: no dedupe key in it (one a line)", path)}
	}
	return lines, nil
}
