// Package operator holds what the operator commands decide, apart from the
// command line: the one-line verdict on a mail and the report `mailsvc
// mail show` prints. It reads store views and returns text, so it is
// tested without cobra, a config or a database; internal/cli parses flags,
// calls the store, and prints what this package returns.
package operator
