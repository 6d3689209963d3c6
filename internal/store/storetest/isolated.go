package storetest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/store"

	"github.com/mailsvc/mailsvc/internal/testenv"
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
	testenv.NeedsServer(t, "PostgreSQL")
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

// HoldInserts makes every INSERT into s's mail table of a row whose
// order_id is orderID wait until the test ends, while every other
// statement runs as usual: a trigger waits on an advisory lock that a
// connection of the test holds (a batch stuck in the database). waiting
// returns how many such inserts wait now.
func (s *Schema) HoldInserts(t testing.TB, orderID string) (waiting func() int64) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
	s.Exec(t, fmt.Sprintf(`CREATE FUNCTION hold_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(%d, 7); RETURN NEW; END $$`, key))
	s.Exec(t, `CREATE TRIGGER hold_insert BEFORE INSERT ON mail FOR EACH ROW
		WHEN (NEW.order_id = '`+strings.ReplaceAll(orderID, "'", "''")+`') EXECUTE FUNCTION hold_insert()`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) }) // frees the lock, and the inserts
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, 7)`, key); err != nil {
		t.Fatalf("hold advisory lock: %v", err)
	}
	return func() int64 {
		return s.QueryInt(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = $1::int::oid AND objid = 7 AND objsubid = 2`, key)
	}
}
