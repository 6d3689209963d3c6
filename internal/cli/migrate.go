package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/store"
)

func newMigrateCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:       "migrate [up|down|status]",
		Short:     "Apply (up, the default), roll back one (down) or list (status) schema migrations",
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"up", "down", "status"},
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			st, err := store.Open(e.ctx, store.Options{URL: cfg.Database.URL.Reveal()})
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s is unreachable: %w (check database.url, or start PostgreSQL)", cfg.Database.URL, err)}
			}
			defer st.Close()
			dir := "up"
			if len(args) == 1 {
				dir = args[0]
			}
			return runMigrate(e, st, dir)
		},
	}
}

func runMigrate(e *env, st *store.Store, dir string) error {
	switch dir {
	case "down":
		v, err := st.MigrateDown(e.ctx)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "rolled back version %d\n", v)
		return err
	case "status":
		all, err := st.MigrateStatus(e.ctx)
		if err != nil {
			return err
		}
		for _, m := range all {
			state := "pending"
			if m.Applied {
				state = "applied"
			}
			fmt.Fprintf(e.stdout, "%05d %-8s %s\n", m.Version, state, m.Source)
		}
		return nil
	default:
		done, err := st.MigrateUp(e.ctx)
		if err != nil {
			return err
		}
		if len(done) == 0 {
			_, err = fmt.Fprintln(e.stdout, "schema is up to date")
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "applied versions %v\n", done)
		return err
	}
}
