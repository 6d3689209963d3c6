package console_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/console"
)

// TestOpenAPIDocumentsEveryRoute: api/openapi.yaml documents exactly the
// API routes the server registers, each action with a 403 for a viewer,
// and every read and action with a 401.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		OpenAPI string `yaml:"openapi"`
		Paths   map[string]map[string]struct {
			OperationID string         `yaml:"operationId"`
			Responses   map[string]any `yaml:"responses"`
		} `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3.1."), doc.OpenAPI)
	var documented, registered []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			require.NotEmpty(t, op.OperationID, path)
			require.Contains(t, op.Responses, "401", "%s %s", method, path)
		}
	}
	for _, rt := range console.Routes() {
		registered = append(registered, rt.Method+" "+rt.Path)
		if rt.Operator {
			op := doc.Paths[rt.Path][strings.ToLower(rt.Method)]
			require.Contains(t, op.Responses, "403", "%s %s", rt.Method, rt.Path)
		}
	}
	slices.Sort(documented)
	slices.Sort(registered)
	require.Equal(t, registered, documented)
}
