package store

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

var updateDesign = flag.Bool("update-design", false, "rewrite the transitions table of docs/design.md from the index")

// designDoc holds the generated table between designBegin and designEnd.
const (
	designDoc   = "../../docs/design.md"
	designBegin = "<!-- transitions: generated from internal/store/transitions.go by `go test ./internal/store -run TestTransitionsIndex -update-design`; do not edit -->\n"
	designEnd   = "<!-- end of transitions -->\n"
)

// TestTransitionsIndex keeps the index of transitions (transitions.go)
// true to the package's SQL and to docs/design.md.
func TestTransitionsIndex(t *testing.T) {
	t.Parallel()
	scanned := scanStatusWrites(t)
	indexed := map[string][]string{} // statement -> its "to" statuses
	for _, tr := range transitions {
		if tr.From != "" {
			require.Contains(t, mailtype.Statuses, tr.From, "from of %+v", tr)
		}
		require.Contains(t, mailtype.Statuses, tr.To, "to of %+v", tr)
		require.NotEmpty(t, tr.By, "by of %+v", tr)
		indexed[tr.Statement] = sortedUnion(indexed[tr.Statement], []string{string(tr.To)})
	}
	for i, a := range transitions {
		for _, b := range transitions[i+1:] {
			require.False(t, a.From == b.From && a.To == b.To && a.Statement == b.Statement, "listed twice: %+v", a)
		}
	}

	var names []string
	for _, w := range scanned {
		names = append(names, w.Statement)
		to, ok := indexed[w.Statement]
		require.True(t, ok, "%s (%s) writes mail.status, but the index (transitions.go) lists no transition of it", w.Statement, w.File)
		if w.To != nil {
			require.Equal(t, w.To, to, "the statuses %s (%s) writes, and those the index lists for it", w.Statement, w.File)
		}
	}
	// Every statement the index names is found writing mail.status, which
	// also proves that the parser sees each kind: an UPDATE with a literal
	// or a CASE or a computed status, an INSERT, SQL inline in a function.
	for name := range indexed {
		require.Contains(t, names, name, "the index names %s, which writes no mail.status in this package", name)
	}
	checkDesignTable(t, renderTransitions(scanned))
}

// renderTransitions renders the index as the markdown table of
// docs/design.md, ordered by from (a new row first), to and statement.
func renderTransitions(scanned []statusWrite) string {
	file := map[string]string{}
	for _, w := range scanned {
		file[w.Statement] = w.File
	}
	rank := func(s mailtype.Status) int { return slices.Index(mailtype.Statuses, s) }
	rows := slices.Clone(transitions)
	slices.SortStableFunc(rows, func(a, b Transition) int {
		if c := rank(a.From) - rank(b.From); c != 0 {
			return c
		}
		if c := rank(a.To) - rank(b.To); c != 0 {
			return c
		}
		return strings.Compare(a.Statement, b.Statement)
	})
	var b strings.Builder
	b.WriteString("| from | to | statement | by |\n|---|---|---|---|\n")
	for _, tr := range rows {
		from := "—"
		if tr.From != "" {
			from = "`" + string(tr.From) + "`"
		}
		fmt.Fprintf(&b, "| %s | `%s` | `%s` (`%s`) | %s |\n", from, tr.To, tr.Statement, file[tr.Statement], tr.By)
	}
	return b.String()
}

// checkDesignTable fails when docs/design.md's generated table is not
// table, or rewrites it with -update-design.
func checkDesignTable(t *testing.T, table string) {
	t.Helper()
	raw, err := os.ReadFile(designDoc)
	require.NoError(t, err)
	doc := string(raw)
	i, j := strings.Index(doc, designBegin), strings.Index(doc, designEnd)
	require.True(t, i >= 0 && j > i, "docs/design.md holds no generated transitions table (%q ... %q)", designBegin, designEnd)
	got := doc[i+len(designBegin) : j]
	if *updateDesign {
		doc = doc[:i+len(designBegin)] + table + doc[j:]
		require.NoError(t, os.WriteFile(designDoc, []byte(doc), 0o644))
		return
	}
	require.Equal(t, table, got, "docs/design.md's transitions table differs from the index; regenerate it: go test ./internal/store -run TestTransitionsIndex -update-design")
}

// TestWritesStatus checks the parser of TestTransitionsIndex on the kinds
// of statements it must tell apart.
func TestWritesStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sql    string
		writes bool
		to     []string
	}{
		{"UPDATE mail SET status = 'sent', sent_at = now() WHERE id = $1", true, []string{"sent"}},
		{"UPDATE mail m SET\n    status = 'sending',\n    attempts = m.attempts + 1 WHERE m.status = 'pending'", true, []string{"sending"}},
		{"UPDATE mail SET status = CASE WHEN $2::bool THEN 'sent' ELSE 'pending' END WHERE status = 'unknown'", true, []string{"pending", "sent"}},
		{"UPDATE mail SET status = CASE WHEN status = 'held' THEN 'cancelled' ELSE status END", true, []string{"cancelled"}},
		{"UPDATE mail SET status = CASE WHEN x THEN 'held' ELSE st END", true, nil},
		{"UPDATE mail m SET status = x.next FROM x", true, nil},
		{"UPDATE mail SET status = $2 WHERE id = $1", true, nil},
		{"UPDATE mail SET locked_until = now() WHERE status = 'sending'", false, nil},
		{"UPDATE mail SET last_error = 'x' -- status = 'failed'\nWHERE id = $1", false, nil},
		{"UPDATE mail_attachment SET status = 'fetched' WHERE id = $1", false, nil},
		{"UPDATE mail SET f = coalesce(a, b), status = 'failed' WHERE id = $1", true, []string{"failed"}},
		{"INSERT INTO mail (dedupe_key, status) VALUES ($1, 'cancelled')", true, []string{"cancelled"}},
		{"INSERT INTO mail (dedupe_key, status, n) SELECT k, CASE WHEN a THEN 'held' ELSE st END, f(1, 2) FROM u", true, nil},
		{"INSERT INTO mail (dedupe_key, status) SELECT k, 'pending' FROM u ON CONFLICT DO NOTHING", true, []string{"pending"}},
		{"INSERT INTO mail (dedupe_key) SELECT NULL::text WHERE false", false, nil},
		{"INSERT INTO mail_attempt (mail_id, status) VALUES ($1, 'sent')", false, nil},
		{"WITH t AS (INSERT INTO mail (k, status) VALUES ($1, 'cancelled')), u AS (UPDATE mail SET status = 'unknown') SELECT 1", true, []string{"cancelled", "unknown"}},
	} {
		to, writes := writesStatus(c.sql)
		require.Equal(t, c.writes, writes, c.sql)
		if c.to == nil {
			require.Nil(t, to, c.sql)
		} else {
			require.Equal(t, c.to, to, c.sql)
		}
	}
}
