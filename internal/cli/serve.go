package cli

import (
	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/app"
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
			return app.Serve(e.ctx, cfg, e.logger(cfg))
		},
	}
}
