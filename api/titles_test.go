package api_test

import (
	"encoding/json"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/api"
)

// untitled returns the JSON pointers of the subschemas of n that a code
// generator turns into a type of its own (an object with properties, or
// an enum) and that have no "title": such a type gets a made-up name
// (AnonymousSchema_42). The conditions of if and not, and examples, are
// not types.
func untitled(n any, path string) []string {
	var out []string
	switch v := n.(type) {
	case map[string]any:
		_, props := v["properties"]
		_, enum := v["enum"]
		if _, ok := v["title"]; !ok && (props || enum) {
			out = append(out, path)
		}
		for k, c := range v {
			switch k {
			case "if", "not", "examples", "enum", "const", "required", "default":
				continue
			}
			out = append(out, untitled(c, path+"/"+k)...)
		}
	case []any:
		for i, c := range v {
			out = append(out, untitled(c, path+"/"+itoa(i))...)
		}
	}
	return out
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestEverySchemaHasATitle keeps generated models named: every schema file,
// every object and enum inside it, every message and every component
// schema of asyncapi.yaml has a title.
func TestEverySchemaHasATitle(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(api.Files, "schemas/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	var bad []string
	for _, name := range names {
		b, err := api.Files.ReadFile(name)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		if _, ok := doc["title"]; !ok {
			bad = append(bad, name+"#")
		}
		for _, p := range untitled(doc, "") {
			bad = append(bad, name+"#"+p)
		}
	}
	b, err := api.Files.ReadFile("asyncapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Messages map[string]map[string]any `yaml:"messages"`
			Schemas  map[string]map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	require.Len(t, doc.Components.Messages, 10)
	for name, m := range doc.Components.Messages {
		if _, ok := m["title"]; !ok {
			bad = append(bad, "asyncapi.yaml#/components/messages/"+name)
		}
	}
	for name, s := range doc.Components.Schemas {
		if _, ok := s["title"]; !ok {
			bad = append(bad, "asyncapi.yaml#/components/schemas/"+name)
		}
		for _, p := range untitled(s, "") {
			bad = append(bad, "asyncapi.yaml#/components/schemas/"+name+p)
		}
	}
	require.Empty(t, bad, "schemas without a title (a code generator names their types AnonymousSchema_N): add one")
}
