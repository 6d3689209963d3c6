package app

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve sets its GC target only when the operator set none.
func TestGCDefaultOnlyWithoutGOGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "150")
	require.Equal(t, "150", applyGCDefault())
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: the target is left alone")

	require.NoError(t, os.Unsetenv("GOGC")) // t.Setenv restores it afterwards
	require.Equal(t, "200", applyGCDefault())
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(100))
}
