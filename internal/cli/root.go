// Package cli is mailsvc's command line (cobra): serve, migrate, config
// check, version and the operator commands of docs/design.md, "Operator commands". It loads
// the config, builds the logger and hands over to the packages that do the
// work. It is the only package that imports cobra.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// ExitError carries the process exit code for an error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the exit code for err: the code of an *ExitError in its
// chain, else 1.
func ExitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

// env is what every command shares: where to write, and how to load config.
type env struct {
	ctx        context.Context
	stdout     io.Writer
	stderr     io.Writer
	configPath string
	// redactor masks the loaded config's secrets in what the command
	// prints and in the error it returns (Execute); nil until load.
	redactor *mailtype.Redactor
}

// load reads the configuration (file, then MAILSVC_* environment). An
// invalid config is an *ExitError with code 2.
func (e *env) load() (*config.Config, error) {
	cfg, err := config.Load(e.configPath, os.LookupEnv)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("invalid config:\n%w", err)}
	}
	e.redactor = cfg.Redactor()
	e.stdout, e.stderr = e.redactor.Writer(e.stdout), e.redactor.Writer(e.stderr)
	return cfg, nil
}

// logger builds the JSON slog logger on stdout (the container log stream)
// at the configured level.
func (e *env) logger(cfg *config.Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level)) // validated by config
	log := slog.New(slog.NewJSONHandler(e.stdout, &slog.HandlerOptions{Level: lvl}))
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	return log
}

// Execute runs the command line args until it ends or ctx is cancelled.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	root := newRootFor(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee *ExitError
	if errors.As(err, &ee) {
		// The exit code stays readable through the redacted text.
		return &ExitError{Code: ee.Code, Err: e.redactor.Error(err)}
	}
	return e.redactor.Error(err)
}

func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	return newRootFor(&env{ctx: ctx, stdout: stdout, stderr: stderr})
}

func newRootFor(e *env) *cobra.Command {
	stdout, stderr := e.stdout, e.stderr
	root := &cobra.Command{
		Use:           "mailsvc",
		Short:         "mailsvc turns order events into customer e-mails, never losing one",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&e.configPath, "config", os.Getenv("MAILSVC_CONFIG"),
		"YAML config file (env MAILSVC_CONFIG); MAILSVC_* variables override it")
	root.AddCommand(
		newServeCmd(e),
		newMigrateCmd(e),
		newConfigCmd(e),
		newVersionCmd(e),
		newTemplateCmd(e),
		newMailCmd(e),
		newProviderCmd(e),
		newDLQCmd(e),
		newOutboxCmd(e),
		newEmitCmd(e),
		newEventCmd(e),
		newSuppressionCmd(e),
		newAuditCmd(e),
	)
	for _, c := range root.Commands() {
		requireSubcommand(c)
	}
	return root
}

// requireSubcommand makes a command that only groups others (mail, dlq,
// outbox, config, template) fail on a missing or unknown subcommand, instead of
// printing help and exiting 0.
func requireSubcommand(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s needs a subcommand (see %s --help)", cmd.CommandPath(), cmd.CommandPath())
		}
	}
	for _, sub := range c.Commands() {
		requireSubcommand(sub)
	}
}

// loadReadOnly reads what a command that only reads the database needs
// (config.LoadReadOnly: database.url). An invalid one is an *ExitError
// with code 2.
func (e *env) loadReadOnly() (*config.Config, error) {
	return e.loadWith(config.LoadReadOnly)
}

// loadBroker reads what a command that only reads the dead-letter queue
// needs (config.LoadBroker: amqp.url, amqp.dead_letter_queue, the
// amqp.tls_* files). An invalid one is an *ExitError with code 2.
func (e *env) loadBroker() (*config.Config, error) {
	return e.loadWith(config.LoadBroker)
}

func (e *env) loadWith(load func(string, func(string) (string, bool)) (*config.Config, error)) (*config.Config, error) {
	cfg, err := load(e.configPath, os.LookupEnv)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("invalid config:\n%w", err)}
	}
	e.redactor = cfg.Redactor()
	e.stdout, e.stderr = e.redactor.Writer(e.stdout), e.redactor.Writer(e.stderr)
	return cfg, nil
}
