package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/mailsvc/mailsvc/internal/e2etest"
)

// TestMain builds mailsvc once (e2etest.Build) and runs the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// make unit: every test here runs mailsvc against the servers and
		// skips itself (testenv.NeedsServer); no binary to build.
		os.Exit(m.Run())
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
