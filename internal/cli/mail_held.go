package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// heldFlags are what release and cancel-held share: whose held mails,
// and how many at most.
type heldFlags struct {
	to    string
	all   bool
	limit int
}

func (f *heldFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.to, "to", "", "only the mails to this address (compared lower-cased)")
	cmd.Flags().BoolVar(&f.all, "all", false, "every held mail, whoever it is to")
	cmd.Flags().IntVar(&f.limit, "limit", 1000, "the most mails acted on, oldest first")
}

// filter checks that exactly one of --to and --all was given: a bulk
// action on every held mail is never the default.
func (f *heldFlags) filter() (store.HeldFilter, error) {
	if (f.to == "") == !f.all {
		return store.HeldFilter{}, &ExitError{Code: 2, Err: errors.New("say whose held mails: --to ADDRESS or --all")}
	}
	if f.limit <= 0 {
		return store.HeldFilter{}, &ExitError{Code: 2, Err: fmt.Errorf("--limit must be positive, got %d", f.limit)}
	}
	to := f.to
	if to != "" {
		var err error
		if to, err = operator.Address(to); err != nil {
			return store.HeldFilter{}, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--to: %w", err)}
		}
	}
	return store.HeldFilter{To: to, Limit: f.limit}, nil
}

func newMailReleaseCmd(e *env) *cobra.Command {
	return newHeldCmd(e, "release", "Send held mails (over mail.recipient_limit): they become pending and are sent as any other",
		"released", (*store.Store).ReleaseHeld)
}

func newMailCancelHeldCmd(e *env) *cobra.Command {
	return newHeldCmd(e, "cancel-held", "Cancel held mails (over mail.recipient_limit), each with its EmailCancelled; none is sent",
		"cancelled", (*store.Store).CancelHeld)
}

// newHeldCmd is a bulk action on held mails: name, its help, the word its
// report uses, and the store's action.
func newHeldCmd(e *env, name, short, did string, act func(*store.Store, context.Context, store.HeldFilter) (int64, error)) *cobra.Command {
	var f heldFlags
	cmd := &cobra.Command{
		Use:   name + " --to ADDRESS|--all [--limit N]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			hf, err := f.filter()
			if err != nil {
				return err
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				n, err := act(st, e.ctx, hf)
				if err != nil {
					return storeError(cfg, "", err)
				}
				_, err = fmt.Fprintf(e.stdout, "%s %d held mail(s)\n", did, n)
				return err
			})
		},
	}
	f.bind(cmd)
	return cmd
}
