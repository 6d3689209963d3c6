package chartcheck

import (
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestChartLint runs `helm lint`'s rules (Helm's lint package): Chart.yaml, values, templates
// rendered and parsed, for the default values and the roles split. Info messages (no icon,
// for example) are allowed; warnings and errors are not.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for name, values := range map[string]map[string]any{
		"default": nil,
		"split":   {"roles": map[string]any{"split": true}, "webhooks": map[string]any{"enabled": true}},
	} {
		l := lint.RunAll(chartDir, values, "shop")
		for _, m := range l.Messages {
			t.Logf("%s: %s", name, m.Error())
		}
		require.Less(t, l.HighestSeverity, support.WarningSev, "%s: helm lint found warnings or errors", name)
	}
}
