package api

import (
	"encoding/json"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// walkSchemas calls fn with every object of every embedded schema, its
// file and its JSON pointer.
func walkSchemas(t *testing.T, fn func(file, ptr string, obj map[string]any)) {
	t.Helper()
	names, err := fs.Glob(Files, "schemas/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		b, err := Files.ReadFile(name)
		require.NoError(t, err)
		var doc any
		require.NoError(t, json.Unmarshal(b, &doc), name)
		var walk func(ptr string, v any)
		walk = func(ptr string, v any) {
			switch x := v.(type) {
			case map[string]any:
				fn(path.Base(name), ptr, x)
				for k, c := range x {
					walk(ptr+"/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"), c)
				}
			case []any:
				for i, c := range x {
					walk(ptr+"/"+strconv.Itoa(i), c)
				}
			}
		}
		walk("", doc)
	}
}

func TestEveryPatternAndNotHasAPhrase(t *testing.T) {
	t.Parallel()
	var patterns, nots []string
	walkSchemas(t, func(file, ptr string, obj map[string]any) {
		if strings.HasSuffix(ptr, "/properties") || strings.HasSuffix(ptr, "/$defs") {
			return // property names, not keywords
		}
		if p, ok := obj["pattern"].(string); ok {
			patterns = append(patterns, p)
			require.Contains(t, patternPhrases, p, "%s#%s: a pattern without a phrase in patternPhrases", file, ptr)
		}
		if _, ok := obj["not"]; ok {
			nots = append(nots, file+"#"+ptr)
			require.Contains(t, notPhrases, file+"#"+ptr, "a 'not' without a phrase in notPhrases")
		}
	})
	for p := range patternPhrases {
		require.True(t, slices.Contains(patterns, p), "patternPhrases has a pattern no schema uses: %q", p)
	}
	for n := range notPhrases {
		require.True(t, slices.Contains(nots, n), "notPhrases has a location no schema has: %q", n)
	}
}
