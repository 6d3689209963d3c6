package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyStoretestCallsTestSupport keeps (*Store).TestSupport out of the
// product: among the module's non-test Go files, only package storetest
// may call it.
func TestOnlyStoretestCallsTestSupport(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	storetest := filepath.Join(root, "internal", "store", "storetest") + string(filepath.Separator)
	var inStoretest, elsewhere []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		if !callsTestSupport(t, path) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if strings.HasPrefix(path, storetest) {
			inStoretest = append(inStoretest, rel)
		} else {
			elsewhere = append(elsewhere, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, inStoretest, "the scan sees storetest's calls")
	require.Empty(t, elsewhere, "only internal/store/storetest may call (*store.Store).TestSupport outside tests")
}

// callsTestSupport reports whether the Go file at path calls a method or
// function named TestSupport.
func callsTestSupport(t *testing.T, path string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err, path)
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "TestSupport" {
				found = true
			}
		}
		return !found
	})
	return found
}
