package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/buildinfo"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(e.stdout, "mailsvc %s (commit %s, %s)\n", buildinfo.Version, buildinfo.Commit, runtime.Version())
			return err
		},
	}
}
