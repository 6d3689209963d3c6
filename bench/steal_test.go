package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchCountsStolenTime holds the steal column to proc(5)'s layout of
// the first line of /proc/stat: the eighth time is steal, and the first
// eight make up the machine's time (guest time is inside user already).
func TestBenchCountsStolenTime(t *testing.T) {
	steal, all, err := parseMachineTicks([]byte("cpu  100 5 50 800 10 1 2 32 7 3\ncpu0 50 2 25 400 5 0 1 16 3 1\n"))
	require.NoError(t, err)
	require.Equal(t, int64(32), steal)
	require.Equal(t, int64(1000), all)
	use := cpuUse{steal: 60, machine: 1000}
	require.Equal(t, "6%!", stealCol(use))
	require.Equal(t, "6%!", stealCol(use.add(use).div(4)), "the share survives the mean of runs")
	require.Equal(t, "3%", stealCol(cpuUse{steal: 30, machine: 1000}))
	require.Equal(t, "0%", stealCol(cpuUse{}), "nothing read: no share")

	_, _, err = parseMachineTicks([]byte("intr 1 2 3\n"))
	require.ErrorContains(t, err, "not the cpu total")
	_, _, err = parseMachineTicks([]byte("cpu  1 2 3 x 5 6 7 8\n"))
	require.ErrorContains(t, err, "cpu field 4")

	steal, all, err = readMachineTicks()
	require.NoError(t, err, "this machine's /proc/stat")
	require.Positive(t, all)
	require.LessOrEqual(t, steal, all)
}
