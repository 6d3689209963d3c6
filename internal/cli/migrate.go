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
			dir := "up"
			if len(args) == 1 {
				dir = args[0]
			}
			load := e.load
			if dir == "status" { // reads the schema only: database.url is enough
				load = e.loadReadOnly
			}
			cfg, err := load()
			if err != nil {
				return err
			}
			st, err := store.Open(e.ctx, store.Options{URL: cfg.Database.URL.Reveal()})
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s is unreachable: %w (check database.url, or start PostgreSQL)", cfg.Database.URL, err)}
			}
			defer st.Close()
			if dir != "status" {
				if err := refuseTransactionPooling(e, st); err != nil {
					return err
				}
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

// refuseTransactionPooling stops migrate up and down behind a transaction
// pooler (PgBouncer's pool_mode = transaction): the migrator serializes
// replicas with a session advisory lock, which does not hold there (its
// unlock can even run on another server session). Exit 2, naming the key.
func refuseTransactionPooling(e *env, st *store.Store) error {
	p, err := st.ProbePooling(e.ctx)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	if p.Shared {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%w: database.url (MAILSVC_DATABASE_URL) leads to a transaction pooler "+
			"(PgBouncer with pool_mode = transaction), where the session advisory lock that serializes migrations does not hold: "+
			"run migrate with a database.url to PostgreSQL itself or to a pool_mode = session pool (docs/deploying.md)",
			store.ErrTransactionPooling)}
	}
	return nil
}
