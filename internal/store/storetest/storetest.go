// Package storetest gives each test its own PostgreSQL schema with every
// migration applied, dropped when the test ends, so tests run in parallel
// against the real server and leave nothing behind.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/store"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// DefaultURL is the test database used when MAILSVC_TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the base URL of the test database.
func URL() string {
	if u := os.Getenv("MAILSVC_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Schema is one test's schema.
type Schema struct {
	// Name is the schema's name.
	Name string
	// URL connects with search_path set to the schema.
	URL string
	// Store is open on URL with every migration applied.
	Store *store.Store
}

// New creates an empty schema, migrates it up, and registers its removal
// with t.Cleanup. An unreachable server fails the test with a message that
// says how to start it.
func New(t testing.TB) *Schema {
	t.Helper()
	sc := NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sc.Store.MigrateUp(ctx); err != nil {
		t.Fatalf("migrate test schema %s: %v", sc.Name, err)
	}
	return sc
}

// NewEmpty is New without migrations.
func NewEmpty(t testing.TB) *Schema {
	t.Helper()
	testenv.NeedsServer(t, "PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := URL()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable: %v\nstart it with `make services` (scripts/services.sh), or set MAILSVC_TEST_DATABASE_URL", redact(base), err)
	}
	defer conn.Close(ctx)
	name := "t_" + randomHex(8)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	u := WithSearchPath(base, name)
	st, err := store.Open(ctx, store.Options{URL: u, MaxConns: 8})
	if err != nil {
		t.Fatalf("open store on schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return &Schema{Name: name, URL: u, Store: st}
}

// withConn runs fn on a fresh connection to the schema, failing the test
// when it cannot connect.
func (s *Schema) withConn(t testing.TB, fn func(ctx context.Context, conn *pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	fn(ctx, conn)
}

// Exec runs one SQL statement in the schema, for fault injection and
// assertions the store's API does not cover. It fails the test on error
// and returns the rows affected.
func (s *Schema) Exec(t testing.TB, sql string, args ...any) (n int64) {
	t.Helper()
	s.withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		tag, err := conn.Exec(ctx, sql, args...)
		if err != nil {
			t.Fatalf("exec %q: %v", sql, err)
		}
		n = tag.RowsAffected()
	})
	return n
}

// QueryInt runs a query returning one integer (a count) in the schema.
func (s *Schema) QueryInt(t testing.TB, sql string, args ...any) (n int64) {
	t.Helper()
	s.withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("query %q: %v", sql, err)
		}
	})
	return n
}

// WithSearchPath returns rawURL with its search_path parameter set to schema.
func WithSearchPath(rawURL, schema string) string {
	return WithParam(rawURL, "search_path", schema)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable url>"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// QueryStrings runs a query returning one text column (EXPLAIN, for one)
// and returns its rows in order.
func (s *Schema) QueryStrings(t testing.TB, sql string, args ...any) []string {
	t.Helper()
	var out []string
	s.withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		rows, err := conn.Query(ctx, sql, args...)
		if err == nil {
			out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatalf("query %q: %v", sql, err)
		}
	})
	return out
}

// QueryMap runs a query returning two text columns and maps the first to
// the second (e.g. dedupe_key -> status).
func (s *Schema) QueryMap(t testing.TB, sql string, args ...any) map[string]string {
	t.Helper()
	out := map[string]string{}
	s.withConn(t, func(ctx context.Context, conn *pgx.Conn) {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("query %q: %v", sql, err)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatalf("scan %q: %v", sql, err)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("query %q: %v", sql, err)
		}
	})
	return out
}

// ExecModes names every pgx query exec mode as the default_query_exec_mode
// parameter of a database URL spells it. The product accepts each of them
// in database.url (a pooler in front of PostgreSQL needs exec or
// simple_protocol), so every statement of the store must work in each.
var ExecModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// OpenInMode opens another store on the schema whose connections run every
// statement in the pgx query exec mode mode (one of ExecModes), and closes
// it when the test ends.
func (s *Schema) OpenInMode(t testing.TB, mode string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: WithParam(s.URL, "default_query_exec_mode", mode), MaxConns: 4})
	if err != nil {
		t.Fatalf("open store on schema %s in exec mode %s: %v", s.Name, mode, err)
	}
	t.Cleanup(st.Close)
	return st
}

// Open opens another store on the schema with o (its URL is the
// schema's), for a test that needs options the schema's own store lacks,
// such as a notice renderer. It is closed when the test ends.
func (s *Schema) Open(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o.URL = s.URL
	st, err := store.Open(ctx, o)
	if err != nil {
		t.Fatalf("open store on schema %s: %v", s.Name, err)
	}
	t.Cleanup(st.Close)
	return st
}

// WithParam returns rawURL with its query parameter key set to value.
func WithParam(rawURL, key, value string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
