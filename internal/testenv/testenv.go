// Package testenv holds the one switch between the two test loops: `make
// test` runs every test against real servers, `make unit` runs go test
// -short, under which each helper that reaches a server (PostgreSQL,
// RabbitMQ, Mailpit, a private Postfix or PostgreSQL, Chromium, the
// mailsvc binary) skips its test instead. Without -short nothing is
// skipped: a missing server still fails its test with how to start it.
package testenv

import "testing"

// NeedsServer skips t under go test -short (make unit), naming what it
// needs; otherwise it does nothing.
func NeedsServer(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (make unit); make test runs it", what)
	}
}
