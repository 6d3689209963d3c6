package templates_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGolden renders the sample order with every template in vi and en and
// compares every part with testdata/<template>.<locale>.{txt,html}; -update
// rewrites the files.
func TestGolden(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	for _, name := range allTemplates {
		for _, locale := range locales {
			t.Run(name+"/"+locale, func(t *testing.T) {
				t.Parallel()
				out, err := r.Render(name, locale, sampleOrder())
				require.NoError(t, err)
				require.Equal(t, locale, out.Locale)
				checkGolden(t, name+"."+locale+".txt", "Subject: "+out.Subject+"\n\n"+out.Text)
				checkGolden(t, name+"."+locale+".html", out.HTML)
			})
		}
	}
}

// checkGolden compares got with testdata/name, or writes it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/templates -update to create it")
	require.Equal(t, string(want), got, "golden file %s differs; review, then -update", path)
}
