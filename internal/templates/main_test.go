package templates_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// update rewrites the golden files: go test ./internal/templates -update
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
