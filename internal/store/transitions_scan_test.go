package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// statusWrite is one statement of package store that writes mail.status:
// an UPDATE of table mail whose SET assigns status, or an INSERT into
// table mail.
type statusWrite struct {
	// Statement is the Go const (or var) that holds the statement, or, for
	// a literal written inline, the function whose literal it is.
	Statement string
	// To are the statuses the statement may write, when they are literals
	// in it; nil when it writes a computed status (a parameter, a column).
	To []string
	// File is the Go file that holds it.
	File string
}

// sqlString is one string of SQL text found in the package's source.
type sqlString struct {
	name, file, text string
	// parts are the package's named values the value of name is built
	// from (finishSQL runs finishUpdateSQL as a CTE).
	parts []string
}

// scanStatusWrites parses every non-test Go file of package store (this
// directory) and returns each statement that writes mail.status, sorted by
// name. Statements are the values of string consts and vars (literals
// joined with +, other consts resolved), and the string literals inside
// functions, named by their function. A statement built from a part that
// writes mail.status is not listed itself: the write is indexed under the
// part, which names the one place its text is written.
func scanStatusWrites(t *testing.T) []statusWrite {
	t.Helper()
	var out []statusWrite
	strs := sqlStrings(t)
	writer := map[string]bool{}
	for _, s := range strs {
		_, writer[s.name] = writesStatus(s.text)
	}
	for _, s := range strs {
		to, writes := writesStatus(s.text)
		if !writes || slices.ContainsFunc(s.parts, func(p string) bool { return writer[p] }) {
			continue
		}
		i := slices.IndexFunc(out, func(w statusWrite) bool { return w.Statement == s.name })
		if i < 0 {
			out = append(out, statusWrite{Statement: s.name, File: s.file, To: to})
			continue
		}
		// Several inline literals of one function: the union.
		if out[i].To != nil && to != nil {
			out[i].To = sortedUnion(out[i].To, to)
		} else {
			out[i].To = nil
		}
	}
	slices.SortFunc(out, func(a, b statusWrite) int { return strings.Compare(a.Statement, b.Statement) })
	return out
}

// sqlStrings returns the named string values and the inline literals of
// the package's non-test files.
func sqlStrings(t *testing.T) []sqlString {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	exprs := map[string]ast.Expr{} // package-level and local named values
	where := map[string]string{}
	var inline []sqlString
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "store" {
			continue
		}
		named := map[*ast.BasicLit]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range vs.Names {
				if i < len(vs.Values) && id.Name != "_" {
					exprs[id.Name] = vs.Values[i]
					where[id.Name] = name
					markLits(vs.Values[i], named)
				}
			}
			return true
		})
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn := funcName(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && !named[lit] {
					inline = append(inline, sqlString{name: fn, file: name, text: unquote(t, lit)})
				}
				return true
			})
		}
	}
	var out []sqlString
	for name, e := range exprs {
		var parts []string
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && exprs[id.Name] != nil {
				parts = append(parts, id.Name)
			}
			return true
		})
		out = append(out, sqlString{name: name, file: where[name], text: evalString(t, e, exprs, 0), parts: parts})
	}
	return append(out, inline...)
}

func markLits(e ast.Expr, named map[*ast.BasicLit]bool) {
	ast.Inspect(e, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok {
			named[lit] = true
		}
		return true
	})
}

// funcName is "name" for a function and "(*T).name" or "T.name" for a
// method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	switch r := fd.Recv.List[0].Type.(type) {
	case *ast.StarExpr:
		if id, ok := r.X.(*ast.Ident); ok {
			return "(*" + id.Name + ")." + fd.Name.Name
		}
	case *ast.Ident:
		return r.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// evalString evaluates e as a string: literals, the package's named
// values and sums of them; the arguments of a call (fmt.Sprintf's format
// and the rest) joined by spaces; "?" for anything else (an imported
// const, a number). It never drops a literal of e, so no statement escapes
// the scan because a piece of it cannot be evaluated.
func evalString(t *testing.T, e ast.Expr, exprs map[string]ast.Expr, depth int) string {
	if depth > 20 {
		return "?"
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return unquote(t, e)
		}
	case *ast.Ident:
		if v, ok := exprs[e.Name]; ok {
			return evalString(t, v, exprs, depth+1)
		}
	case *ast.ParenExpr:
		return evalString(t, e.X, exprs, depth+1)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return evalString(t, e.X, exprs, depth+1) + evalString(t, e.Y, exprs, depth+1)
		}
	case *ast.CallExpr:
		var parts []string
		for _, a := range e.Args {
			parts = append(parts, evalString(t, a, exprs, depth+1))
		}
		return strings.Join(parts, " ")
	}
	return "?"
}

func unquote(t *testing.T, lit *ast.BasicLit) string {
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatalf("unquote %s: %v", lit.Value, err)
	}
	return s
}

var (
	sqlComment = regexp.MustCompile(`--[^\n]*`)
	updateMail = regexp.MustCompile(`(?i)\bUPDATE\s+mail(?:\s+(?:AS\s+)?\w+)?\s+SET\s`)
	insertMail = regexp.MustCompile(`(?i)\bINSERT\s+INTO\s+mail\s*\(`)
	setTarget  = regexp.MustCompile(`^\s*(?:\w+\.)?(\w+)\s*=`)
	statusLit  = regexp.MustCompile(`^'(\w+)'`)
	caseBranch = regexp.MustCompile(`(?i)\b(?:THEN|ELSE)\s+('\w+'|[\w.$]+)`)
	setEnd     = regexp.MustCompile(`(?i)^(FROM|WHERE|RETURNING)\b`)
	selectEnd  = regexp.MustCompile(`(?i)^(FROM|WHERE|ON\s+CONFLICT|RETURNING)\b`)
)

// writesStatus reports whether the SQL text writes mail.status, and the
// statuses it writes when they are literals (nil when one is computed).
func writesStatus(sql string) (to []string, writes bool) {
	sql = sqlComment.ReplaceAllString(sql, "")
	computed := false
	add := func(vals []string) {
		if vals == nil {
			computed = true
			return
		}
		to = sortedUnion(to, vals)
	}
	for _, loc := range updateMail.FindAllStringIndex(sql, -1) {
		for _, item := range splitTop(sql[loc[1]:], setEnd) {
			if m := setTarget.FindStringSubmatch(item); m != nil && strings.EqualFold(m[1], "status") {
				writes = true
				add(statusValues(item[strings.Index(item, "=")+1:]))
			}
		}
	}
	for _, loc := range insertMail.FindAllStringIndex(sql, -1) {
		if vals, ok := insertedStatus(sql[loc[1]:]); ok {
			writes = true
			add(vals)
		}
	}
	if computed {
		return nil, writes
	}
	return to, writes
}

// insertedStatus returns the statuses an INSERT writes; rest follows
// "INSERT INTO mail (". ok is false when the INSERT names no status
// column: mail.status has no default, so such an INSERT writes no row (a
// probe, writable.go).
func insertedStatus(rest string) (vals []string, ok bool) {
	end := strings.Index(rest, ")")
	if end < 0 {
		return nil, true
	}
	var cols []string
	for _, c := range strings.Split(rest[:end], ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	pos := slices.Index(cols, "status")
	if pos < 0 {
		return nil, false
	}
	rest = strings.TrimSpace(rest[end+1:])
	var exprs []string
	switch up := strings.ToUpper(rest); {
	case strings.HasPrefix(up, "VALUES"):
		exprs = splitTop(rest[strings.Index(rest, "(")+1:], nil)
	case strings.HasPrefix(up, "SELECT"):
		exprs = splitTop(rest[len("SELECT"):], selectEnd)
	}
	if pos >= len(exprs) {
		return nil, true
	}
	return statusValues(exprs[pos]), true
}

// statusValues returns the statuses an expression assigned to status
// yields: a literal, or the literals of a CASE's THEN and ELSE branches
// when every other branch keeps the row's status; nil when any is
// computed (a parameter, another column).
func statusValues(expr string) []string {
	expr = strings.TrimSpace(strings.ReplaceAll(expr, "::text", ""))
	if m := statusLit.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	if !strings.HasPrefix(strings.ToUpper(expr), "CASE") {
		return nil
	}
	out := []string{}
	for _, m := range caseBranch.FindAllStringSubmatch(expr, -1) {
		switch v := m[1]; {
		case strings.HasPrefix(v, "'"):
			out = sortedUnion(out, []string{strings.Trim(v, "'")})
		case v == "status" || strings.HasSuffix(v, ".status"):
			// keeps the row's status: no transition
		default:
			return nil
		}
	}
	return out
}

// splitTop splits s at its top-level commas (outside parentheses and
// quotes) until a top-level keyword that end matches, or a closing
// parenthesis that ends the enclosing group.
func splitTop(s string, end *regexp.Regexp) []string {
	var items []string
	depth, start := 0, 0
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote:
			if c == '\'' {
				inQuote = false
			}
		case c == '\'':
			inQuote = true
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return append(items, s[start:i])
			}
			depth--
		case c == ',' && depth == 0:
			items = append(items, s[start:i])
			start = i + 1
		case depth == 0 && end != nil && (i == 0 || !isWord(s[i-1])) && end.MatchString(s[i:]):
			return append(items, s[start:i])
		}
	}
	return append(items, s[start:])
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
