package templates_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// TestGolden renders the sample order in vi and en and compares every part
// with testdata; -update rewrites the files.
func TestGolden(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	for _, locale := range []string{"vi", "en"} {
		t.Run(locale, func(t *testing.T) {
			t.Parallel()
			out, err := r.Render(templates.OrderConfirmed, locale, sampleOrder())
			require.NoError(t, err)
			require.Equal(t, locale, out.Locale)
			checkGolden(t, "order_confirmed."+locale+".txt", "Subject: "+out.Subject+"\n\n"+out.Text)
			checkGolden(t, "order_confirmed."+locale+".html", out.HTML)
		})
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
