// Package testhook lends internal/store/storetest the few unexported parts
// of package store that its helpers need: a store's connection pool, the
// claim statement and the outbox write. Package store fills the variables
// in at init (internal/store/testhook.go), with its own production code
// and nothing else; only storetest reads them, and only test code imports
// storetest (depguard, .golangci.yml). Go's internal rule keeps every
// package outside internal/store from importing this one.
package testhook

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The values are typed any where they are store types, which this package
// cannot name (store imports it); storetest wraps each in a typed function.
var (
	// Pool returns the connection pool of st, a *store.Store.
	Pool func(st any) *pgxpool.Pool
	// ClaimSQL is the claim statement: $1 the limit, $2 the lease
	// (interval), $3 the worker, $4 the priority lane's share
	// (store.ClaimParams.PriorityRows).
	ClaimSQL string
	// InsertFeedback writes f, a store.Feedback, inside tx as the outbox
	// row st writes for it (its events exchange, a fresh UUIDv7 event id).
	InsertFeedback func(ctx context.Context, st any, tx pgx.Tx, f any) error
)
