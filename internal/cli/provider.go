package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func newProviderCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "provider", Short: "The providers' shared state: rate-limit pauses, quotas, the circuit breaker"}
	cmd.AddCommand(newProviderStatusCmd(e), newProviderResumeCmd(e))
	return cmd
}

// providerJSON is one provider of `provider status --json`.
type providerJSON struct {
	Provider    string `json:"provider"`
	Paused      bool   `json:"paused"`
	Reason      string `json:"reason,omitempty"`
	PausedAt    string `json:"paused_at,omitempty"`
	PausedUntil string `json:"paused_until,omitempty"`
	Error       string `json:"error,omitempty"`
	Failures    int    `json:"failures"`
	Verdict     string `json:"verdict"`
}

func newProviderStatusCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether each provider sends or is paused (rate limit, quota, breaker), for every replica",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error {
				states, err := st.ProviderStates(e.ctx)
				if err != nil {
					return storeError(cfg, "", err)
				}
				if asJSON {
					out := make([]providerJSON, len(states))
					for i, s := range states {
						out[i] = providerJSON{Provider: s.Provider, Paused: s.Paused(), Reason: string(s.Reason),
							PausedAt: operator.Stamp(&s.PausedAt), PausedUntil: operator.Stamp(&s.PausedUntil),
							Error: s.Error, Failures: s.Failures, Verdict: operator.ProviderVerdict(s)}
					}
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				for _, s := range states {
					fmt.Fprintf(tw, "%s:\t%s\n", s.Provider, operator.ProviderVerdict(s))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newProviderResumeCmd(e *env) *cobra.Command {
	var af actorFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "resume NAME [--reason R] [--actor A] [--dry-run]",
		Short: "End a provider's pause now (after raising a quota or fixing its configuration), for every replica",
		Long: "Ends the pause of provider NAME (smtp or resend) and closes its breaker, for every replica " +
			"within sender.poll_interval, instead of waiting for the next probe. If the cause is still there, " +
			"the next sends pause it again.",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				return printAction(e, cfg)(actions(cfg, st).ResumeProvider(e.ctx, af.who(), args[0], af.reason, dryRun))
			})
		},
	}
	af.bind(cmd, "why, for the audit log")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the provider's state now; change nothing")
	return cmd
}
