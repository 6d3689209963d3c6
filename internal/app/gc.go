package app

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
)

// defaultGCPercent is the garbage collector's target (GOGC) that serve
// runs with when the environment sets none: the heap may grow to three
// times what is live before a collection, where Go's default of 100 lets
// it grow to twice. Measured with `make bench` (BenchmarkEndToEnd at full
// speed, two runs each): the process spent about 10% less CPU per mail
// (449 against 404 µs) and delivered about 5% more mails per second. The
// price is memory: the heap's peak grows by about what is live, a few
// megabytes here (docs/benchmarks.md). GOMEMLIMIT still bounds it: the
// collector runs more often as the heap nears the limit, whatever GOGC
// says.
const defaultGCPercent = 200

// applyGCDefault sets defaultGCPercent unless the environment sets GOGC
// to a value (the operator's choice, which the runtime applied at start;
// an empty GOGC is no choice, as for the runtime), and returns the GC
// target in effect as GOGC spells it ("off" when collection is off). When
// GOGC holds a value the runtime could not read (it then keeps its
// default, 100), ignored is that value.
func applyGCDefault() (effective, ignored string) {
	v := os.Getenv("GOGC")
	if v == "" {
		debug.SetGCPercent(defaultGCPercent)
		return strconv.Itoa(defaultGCPercent), ""
	}
	pct := debug.SetGCPercent(-1) // reads the target in effect ...
	debug.SetGCPercent(pct)       // ... and puts it back
	effective = "off"
	if pct >= 0 {
		effective = strconv.Itoa(pct)
	}
	if n, err := strconv.Atoi(v); v != "off" && (err != nil || n != pct) {
		ignored = v
	}
	return effective, ignored
}

// memoryLimit is the runtime's soft memory limit (GOMEMLIMIT) in bytes,
// "none" when there is none.
func memoryLimit() string {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return strconv.FormatInt(l, 10)
	}
	return "none"
}
