// Package buildinfo holds the version and commit injected at build time:
//
//	go build -ldflags "-X github.com/mailsvc/mailsvc/internal/buildinfo.Version=v1.2.3 -X github.com/mailsvc/mailsvc/internal/buildinfo.Commit=abc123"
package buildinfo

// Version is the release version; "dev" when not injected.
var Version = "dev"

// Commit is the VCS commit; "unknown" when not injected.
var Commit = "unknown"
