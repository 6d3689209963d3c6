package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/mailsvc/mailsvc/migrations"
)

// ErrSchemaBehind is returned by CheckSchema when migrations are pending.
var ErrSchemaBehind = errors.New("database schema is behind: run `mailsvc migrate`")

// MigrationStatus is one migration and whether it is applied.
type MigrationStatus struct {
	Version int64
	Source  string
	Applied bool
}

// withMigrator runs fn with a goose provider over the embedded migrations.
// A PostgreSQL session advisory lock serializes replicas that migrate the
// same schema at the same time, so running migrate twice, or from two
// replicas, is safe. The lock id is derived from the schema name, so
// schemas of one database (tests) do not wait for each other; it is polled
// every second for up to 5 minutes.
func (s *Store) withMigrator(fn func(*goose.Provider) error) error {
	var schema string
	if err := s.pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		return interpretError(err)
	}
	h := fnv.New64a()
	h.Write([]byte("mailsvc-migrate:" + schema))
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64()>>1)), lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	return fn(p)
}

// MigrateUp applies every pending migration and returns the versions applied.
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	var done []int64
	err := s.withMigrator(func(p *goose.Provider) error {
		res, err := p.Up(ctx)
		for _, r := range res {
			done = append(done, r.Source.Version)
		}
		return err
	})
	if err != nil {
		return done, fmt.Errorf("migrate up: %w", interpretError(err))
	}
	return done, nil
}

// MigrateDown rolls back the latest migration and returns its version, or
// 0 when none was applied.
func (s *Store) MigrateDown(ctx context.Context) (int64, error) {
	var v int64
	err := s.withMigrator(func(p *goose.Provider) error {
		res, err := p.Down(ctx)
		if res != nil {
			v = res.Source.Version
		}
		if errors.Is(err, goose.ErrNoNextVersion) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("migrate down: %w", interpretError(err))
	}
	return v, nil
}

// MigrateStatus lists every embedded migration and whether it is applied.
func (s *Store) MigrateStatus(ctx context.Context) ([]MigrationStatus, error) {
	var out []MigrationStatus
	err := s.withMigrator(func(p *goose.Provider) error {
		st, err := p.Status(ctx)
		for _, m := range st {
			out = append(out, MigrationStatus{Version: m.Source.Version, Source: m.Source.Path, Applied: m.State == goose.StateApplied})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", interpretError(err))
	}
	return out, nil
}

// CheckSchema returns ErrSchemaBehind (wrapped, with the versions) when the
// database lacks a migration this binary embeds.
func (s *Store) CheckSchema(ctx context.Context) error {
	var current, target int64
	err := s.withMigrator(func(p *goose.Provider) error {
		var err error
		current, target, err = p.GetVersions(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("check schema: %w", interpretError(err))
	}
	if current < target {
		return fmt.Errorf("%w (database at version %d, binary needs %d)", ErrSchemaBehind, current, target)
	}
	return nil
}
