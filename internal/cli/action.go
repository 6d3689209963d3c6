package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// actorFlags are the flags every action takes: who acts, and why. Both go
// to the audit log (docs/design.md, "Audit log").
type actorFlags struct {
	actor, reason string
}

// bind adds --actor and --reason to cmd; reasonHelp says what --reason
// is for this command.
func (f *actorFlags) bind(cmd *cobra.Command, reasonHelp string) {
	cmd.Flags().StringVar(&f.actor, "actor", "", "who acts, for the audit log (default: the operating system's user, else $USER)")
	cmd.Flags().StringVar(&f.reason, "reason", "", reasonHelp)
}

// who is the actor of the command: --actor, else the OS user's login
// name, else $USER, else "unknown"; through the CLI.
func (f *actorFlags) who() operator.Actor {
	return operator.Actor{Name: actorName(f.actor), Via: store.ViaCLI}
}

func actorName(flag string) string {
	if flag != "" {
		return flag
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "unknown"
}

// actions is the operator.Actions of cfg on st (the dead-letter replay
// set by the command that needs it).
func actions(cfg *config.Config, st *store.Store) *operator.Actions {
	return &operator.Actions{Store: st, FromDomain: mailtype.AddressDomain(cfg.Mail.From),
		Namespace: cfg.Mail.IdempotencyNamespace, DeadLetterQueue: cfg.AMQP.DeadLetterQueue}
}

// actionError maps an error of an operator action or lookup to its exit
// code (operator.KindOf): 2 input that cannot mean anything, 3 not found,
// 4 refused by the state, 5 the database (named by cfg's URL), else 1.
// An *ExitError in its chain keeps its code.
func actionError(cfg *config.Config, err error) error {
	var ee *ExitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	switch operator.KindOf(err) {
	case operator.KindInvalid:
		return &ExitError{Code: ExitInvalid, Err: err}
	case operator.KindNotFound:
		return &ExitError{Code: ExitNotFound, Err: err}
	case operator.KindRefused:
		return &ExitError{Code: ExitRefused, Err: err}
	case operator.KindUnavailable:
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("database %s: %w", cfg.Database.URL, err)}
	}
	return err
}

// printAction returns the function that prints an action's summary on
// stdout, or returns its error with its exit code (actionError).
func printAction(e *env, cfg *config.Config) func(operator.Result, error) error {
	return func(res operator.Result, err error) error {
		if err != nil {
			return actionError(cfg, err)
		}
		_, err = fmt.Fprintln(e.stdout, res.Summary)
		return err
	}
}
