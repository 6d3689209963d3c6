package storetest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/store"
)

// NewRole creates a login role of its own for one test, with the
// privileges mailsvc needs on s's tables, and returns s.URL connecting as
// it: a test can then REVOKE and GRANT (through s.Exec, which connects as
// the owner) without touching anyone else's. The role is dropped when the
// test ends; close what connects as it first (register it later).
func (s *Schema) NewRole(t testing.TB) (role, roleURL string) {
	t.Helper()
	role = "r_" + randomHex(6)
	s.Exec(t, "CREATE ROLE "+role+" LOGIN")
	s.Exec(t, "GRANT USAGE ON SCHEMA "+s.Name+" TO "+role)
	s.Exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+s.Name+" TO "+role)
	s.Exec(t, "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "+s.Name+" TO "+role)
	t.Cleanup(func() {
		s.Exec(t, "DROP OWNED BY "+role)
		s.Exec(t, "DROP ROLE "+role)
	})
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatalf("parse %s: %v", redact(s.URL), err)
	}
	u.User = url.User(role)
	return role, u.String()
}

// Database is a database of one test's own, migrated, for faults that are
// set per database (ALTER DATABASE ... SET), never on the shared one.
type Database struct {
	// Name is the database's name; URL connects to it as the owner.
	Name string
	URL  string
}

// NewDatabase creates a database with every migration applied and drops
// it (with its sessions) when the test ends.
func NewDatabase(t testing.TB) *Database {
	t.Helper()
	name := "t_" + randomHex(8)
	admin(t, "CREATE DATABASE "+name)
	t.Cleanup(func() { admin(t, "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("parse %s: %v", redact(URL()), err)
	}
	u.Path = "/" + name
	d := &Database{Name: name, URL: u.String()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: d.URL, MaxConns: 2})
	if err != nil {
		t.Fatalf("open store on database %s: %v", name, err)
	}
	defer st.Close()
	if _, err := st.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate database %s: %v", name, err)
	}
	return d
}

// Exec runs one statement on the test server as the owner, outside d
// (ALTER DATABASE and pg_terminate_backend need no session in d).
func (d *Database) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	admin(t, sql, args...)
}

// QueryInt runs a query returning one integer (a count) in d.
func (d *Database) QueryInt(t testing.TB, sql string, args ...any) (n int64) {
	t.Helper()
	(&Schema{URL: d.URL}).withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("query %q: %v", sql, err)
		}
	})
	return n
}

// admin runs one statement on the base test database.
func admin(t testing.TB, sql string, args ...any) {
	t.Helper()
	(&Schema{URL: URL()}).withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("exec %q: %v", sql, err)
		}
	})
}
