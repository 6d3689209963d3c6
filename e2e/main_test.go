package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/mailsvc/mailsvc/internal/e2etest"
)

// TestMain builds mailsvc once (e2etest.Build) and runs the tests.
func TestMain(m *testing.M) {
	cleanup, err := e2etest.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
