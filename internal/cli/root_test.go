package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupCommandsRefuseUnknownSubcommands(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"mail", "frobnicate"}, {"dlq"}, {"config", "nope"}, {"template"}} {
		var out, errb bytes.Buffer
		err := Execute(context.Background(), args, &out, &errb)
		require.Error(t, err, "%v", args)
		require.NotEqual(t, 0, ExitCode(err))
	}
}
