package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

func newServeCmd(e *env) *cobra.Command {
	var roles []string
	cmd := &cobra.Command{
		Use:   "serve [--roles consumer,sender,relay]",
		Short: "Run the daemon: consumer, sender pool, outbox relay (or the roles named), /metrics, /healthz, /readyz",
		Long: "Run the daemon: consumer, sender pool, outbox relay (or the roles named), and on http.addr\n" +
			"/metrics, /healthz, /readyz, plus Go's profiles under /debug/pprof/ when http.pprof is true.",
		Example: "  mailsvc serve\n  mailsvc serve --roles sender,relay   # delivery and feedback, no intake\n" +
			"  mailsvc serve --roles consumer       # intake only",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("roles") {
				cfg.Serve.Roles = roles
				if err := cfg.Validate(); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("invalid --roles (serve.roles):\n%w", err)}
				}
			}
			err = app.Serve(e.ctx, cfg, e.logger(cfg))
			if ue := (*app.UnavailableError)(nil); errors.As(err, &ue) {
				return &ExitError{Code: ExitUnavailable, Err: err}
			}
			if errors.Is(err, tracing.ErrConfig) || errors.Is(err, store.ErrTransactionPooling) {
				return &ExitError{Code: 2, Err: err}
			}
			return err
		},
	}
	cmd.Flags().StringSliceVar(&roles, "roles", nil,
		"roles to run, comma-separated: "+strings.Join(config.Roles, ", ")+" (default serve.roles, which defaults to all three)")
	return cmd
}
