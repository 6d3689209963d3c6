// Command mailsvc is the mail-delivery daemon and its operator CLI. main
// turns SIGINT/SIGTERM into a cancelled context, runs the command, and maps
// its error to an exit code; everything else lives in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mailsvc/mailsvc/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mailsvc:", err)
		os.Exit(cli.ExitCode(err))
	}
}
