package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMailpitServesItsWebUI checks that bin/mailpit carries its web UI (scripts/build-mailpit.sh
// embeds tools/mailpit-ui/dist): the inbox page names its script and stylesheet, and both are
// served. Built from the Go module alone, Mailpit answers 404 for them and the UI is a blank
// page. What a person sees is checked by `make ui-check` (headless Chromium).
func TestMailpitServesItsWebUI(t *testing.T) {
	mp := startMailpit(t)
	base := strings.TrimSuffix(mp.APIURL, "/api/v1")
	page := httpGetBody(t, base+"/")
	assets := regexp.MustCompile(`(?:src|href)="(/dist/app\.(?:js|css))[^"]*"`).FindAllStringSubmatch(page, -1)
	require.Len(t, assets, 2, "the inbox page links app.js and app.css:\n%s", page)
	for _, a := range assets {
		body := httpGetBody(t, base+a[1])
		require.Greater(t, len(body), 50_000, "%s is the compiled UI, not a stub", a[1])
	}
}

func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode, "GET %s: %s", url, b)
	return string(b)
}
