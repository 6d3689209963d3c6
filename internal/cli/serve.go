package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/tracing"
)

func newServeCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: consumer, sender pool, outbox relay, /metrics, /healthz, /readyz",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			err = app.Serve(e.ctx, cfg, e.logger(cfg))
			if errors.Is(err, tracing.ErrConfig) {
				return &ExitError{Code: 2, Err: err}
			}
			return err
		},
	}
}
