package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// skipOptions are the flags of `dlq skip`.
type skipOptions struct {
	ff      filterFlags
	confirm bool
	dryRun  bool
	af      actorFlags
}

func newDLQSkipCmd(e *env) *cobra.Command {
	var o skipOptions
	cmd := &cobra.Command{
		Use:   "skip ID --reason TEXT | skip [--error-reason R] [--routing-key K] [--older-than D] --reason TEXT --confirm",
		Short: "Remove dead-lettered messages for good: one by its id, or those a filter selects with --confirm; an audit row each, with its body",
		Long: `Removes dead-lettered messages for good, each with an audit row that keeps its reason, routing
key and the first 600 bytes of its body (` + "`mailsvc audit list`" + `). --reason is required.

With ID (the id ` + "`dlq list`" + ` prints, or a message_id that exactly one message carries) it removes
that message. With filters instead it removes every message they select, and only with --confirm:
without it, it lists them and removes nothing. The other messages stay in the queue, in order.`,
		Example: "  mailsvc dlq skip dl-3f2a9c01b7e4 --reason 'test event from the staging producer'\n" +
			"  mailsvc dlq skip --error-reason malformed_json --older-than 24h --reason 'INC-9 bad producer build' --confirm",
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if strings.TrimSpace(o.af.reason) == "" {
				return &ExitError{Code: ExitInvalid, Err: errors.New("--reason is required: a skipped message is gone for good; say why, for the audit log")}
			}
			if len(args) == 1 && !o.ff.f.Empty() {
				return &ExitError{Code: ExitInvalid, Err: errors.New("give an ID or filters, not both")}
			}
			if len(args) == 0 && o.ff.f.Empty() {
				return &ExitError{Code: ExitInvalid, Err: errors.New("give an ID, or at least one of --error-reason, --routing-key, --older-than (with --confirm)")}
			}
			return e.withStore(func(cfg *config.Config, st *store.Store) error {
				a := actions(cfg, st)
				if len(args) == 1 {
					return skipOne(e, cfg, a, strings.TrimSpace(args[0]), o)
				}
				return skipFiltered(e, cfg, a, o)
			})
		},
	}
	o.af.bind(cmd, "why the messages are dropped, for the audit log (required)")
	o.ff.bind(cmd, "error-reason")
	cmd.Flags().BoolVar(&o.confirm, "confirm", false, "with filters: really remove every message they select")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "say what would be removed; change nothing")
	return cmd
}

// errStop ends a sweep early once its message is removed.
var errStop = errors.New("stop")

// skipOne removes the message id (or the one message with that
// message_id) through the operator action.
func skipOne(e *env, cfg *config.Config, a *operator.Actions, id string, o skipOptions) error {
	skip := func(ctx context.Context, dryRun bool) (operator.DeadLetter, error) {
		var found []deadletter.Entry
		err := browseDLQ(cfg, "mailsvc-dlq-skip", func(en deadletter.Entry, _ func() error) error {
			if en.ID == id || en.MessageID == id {
				found = append(found, en)
			}
			return nil
		})
		switch ids := idsOf(found); {
		case err != nil:
			return operator.DeadLetter{}, err
		case len(found) == 0:
			return operator.DeadLetter{}, operator.NoDeadLetterError(id)
		case len(ids) > 1:
			return operator.DeadLetter{}, operator.AmbiguousDeadLetterError(id, ids)
		case dryRun:
			return letter(found[0]), nil
		}
		return removeEntry(cfg, found[0].ID, id)
	}
	res, err := a.SkipDeadLetter(e.ctx, o.af.who(), id, o.af.reason, o.dryRun, skip)
	return printAction(e, cfg)(res, err)
}

// removeEntry removes the first message whose id is entryID.
func removeEntry(cfg *config.Config, entryID, asked string) (operator.DeadLetter, error) {
	var got *deadletter.Entry
	err := browseDLQ(cfg, "mailsvc-dlq-skip", func(en deadletter.Entry, remove func() error) error {
		if en.ID != entryID {
			return nil
		}
		if err := remove(); err != nil {
			return err
		}
		got = &en
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return operator.DeadLetter{}, err
	}
	if got == nil {
		return operator.DeadLetter{}, operator.NoDeadLetterError(asked) // taken meanwhile
	}
	return letter(*got), nil
}

func letter(en deadletter.Entry) operator.DeadLetter {
	return operator.DeadLetter{ID: en.ID, MessageID: en.MessageID, RoutingKey: en.RoutingKey, Reason: en.Reason, Body: en.Body}
}

// skipFiltered removes every message o's filter selects, each through the
// operator action (an audit row each); without --confirm it lists them.
func skipFiltered(e *env, cfg *config.Config, a *operator.Actions, o skipOptions) error {
	now := time.Now()
	dry := o.dryRun || !o.confirm
	n := 0
	err := browseDLQ(cfg, "mailsvc-dlq-skip", func(en deadletter.Entry, remove func() error) error {
		if !o.ff.f.Match(en, now) {
			return nil
		}
		n++
		skip := func(context.Context, bool) (operator.DeadLetter, error) {
			if dry {
				return letter(en), nil
			}
			return letter(en), remove()
		}
		res, err := a.SkipDeadLetter(e.ctx, o.af.who(), en.ID, o.af.reason, dry, skip)
		if res.Summary != "" {
			fmt.Fprintln(e.stdout, res.Summary)
		}
		return err
	})
	if err != nil {
		return actionError(cfg, err)
	}
	switch {
	case !o.confirm && !o.dryRun:
		return &ExitError{Code: ExitRefused, Err: fmt.Errorf("%d dead-lettered messages match %s; nothing was removed: add --confirm to remove them for good", n, o.ff.f)}
	case dry:
		_, err = fmt.Fprintf(e.stdout, "would remove %d dead-lettered messages matching %s (dry run: nothing changed)\n", n, o.ff.f)
	default:
		_, err = fmt.Fprintf(e.stdout, "removed %d dead-lettered messages matching %s for good; the others stay in the queue, in order\n", n, o.ff.f)
	}
	return err
}
