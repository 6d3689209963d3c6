// Package migrations embeds the numbered SQL migrations (goose format) that
// create mailsvc's schema. Applied by `mailsvc migrate` through internal/store.
//
// Numbering: 00001-00009 foundation; later migrations take the next free
// number. Every migration has a Down section.
package migrations

import "embed"

// FS holds the *.sql migration files.
//
//go:embed *.sql
var FS embed.FS
