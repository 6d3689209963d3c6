package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/mailsvc/mailsvc/internal/e2etest"
)

// TestMain builds mailsvc once (e2etest.Build) and runs the benchmarks;
// with MAILSVC_BENCH_RAW_CHILD set, it is instead the raw baseline's
// process of BenchmarkEndToEnd (runRawChild), which startBaseline starts.
func TestMain(m *testing.M) {
	if os.Getenv(rawChildEnv) != "" {
		os.Exit(runRawChild())
	}
	cleanup, err := e2etest.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
