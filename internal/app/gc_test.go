package app

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve sets its GC target only when the operator set none, and reports
// the target in effect: the runtime's, which read GOGC at start (set here
// by hand, as the runtime would have), even when GOGC holds a value the
// runtime could not read.
func TestGCDefaultOnlyWithoutGOGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	for _, c := range []struct {
		env              string
		runtime          int
		effective, wrong string
		after            int
	}{
		{env: "150", runtime: 150, effective: "150", after: 150},
		{env: "+50", runtime: 50, effective: "50", after: 50},
		{env: "off", runtime: -1, effective: "off", after: -1},
		{env: "garbage", runtime: 100, effective: "100", wrong: "garbage", after: 100},
		{env: "OFF", runtime: 100, effective: "100", wrong: "OFF", after: 100},
		{env: "", runtime: 100, effective: "200", after: defaultGCPercent},
	} {
		t.Setenv("GOGC", c.env)
		debug.SetGCPercent(c.runtime)
		effective, wrong := applyGCDefault()
		require.Equal(t, c.effective, effective, "GOGC=%q", c.env)
		require.Equal(t, c.wrong, wrong, "GOGC=%q", c.env)
		require.Equal(t, c.after, debug.SetGCPercent(100), "GOGC=%q: the target in effect", c.env)
	}

	require.NoError(t, os.Unsetenv("GOGC")) // t.Setenv restores it afterwards
	effective, wrong := applyGCDefault()
	require.Equal(t, "200", effective)
	require.Empty(t, wrong)
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(100))
}

// The start-up line reports GOMEMLIMIT as the runtime holds it.
func TestMemoryLimitReported(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	require.Equal(t, "none", memoryLimit())
	debug.SetMemoryLimit(230 << 20)
	require.Equal(t, "241172480", memoryLimit())
}
