// Package docs_test keeps the repository self-contained and its pointers into
// the documentation true: no file refers to a design file or a shared folder
// outside the repository, every `docs/NAME.md, "Section"` pointer in a
// comment names a heading that exists, and every relative link of a Markdown
// file reaches a file (and, with an anchor, a heading) in the repository.
package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, relative to this package's directory (go
// test runs tests in the package directory).
const repoRoot = ".."

// outsidePaths are references to files that live outside the repository.
// They are spelled in two parts so that this file does not contain them.
var outsidePaths = []string{"DESIGN" + ".md", "../" + "shared"}

// repoFiles returns the repository's files, relative to repoRoot: the tracked
// ones and the untracked ones git does not ignore, minus files deleted from
// the work tree.
func repoFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	require.NoError(t, err, "git ls-files (the test needs git and a git checkout)")
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(repoRoot, f)); err != nil || !st.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	return files
}

// readText returns the file's content, or false for a binary file (one
// holding a NUL byte).
func readText(t *testing.T, rel string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	require.NoError(t, err)
	return string(b), !bytes.Contains(b, []byte{0})
}

func TestNoReferenceOutsideTheRepository(t *testing.T) {
	t.Parallel()
	var bad []string
	for _, f := range repoFiles(t) {
		text, ok := readText(t, f)
		if !ok {
			continue
		}
		for i, line := range strings.Split(text, "\n") {
			for _, p := range outsidePaths {
				if strings.Contains(line, p) {
					bad = append(bad, f+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				}
			}
		}
	}
	require.Empty(t, bad, "files refer to paths outside the repository; point at docs/design.md, docs/architecture.md or docs/contract.md instead")
}

// pointerRE matches a pointer such as `(docs/design.md, "State machine")`,
// also when a comment line break (// , # or -- ) falls after the comma, with
// further titles joined by "and" or ";".
var pointerRE = regexp.MustCompile(`docs/([a-z]+)\.md,(?:\s|//|#|--)*"([^"\n]+)"((?:\s*(?:and|,)\s*(?:\s|//|#|--)*"[^"\n]+")*)`)

var quotedRE = regexp.MustCompile(`"([^"\n]+)"`)

func TestPointersNameExistingSections(t *testing.T) {
	t.Parallel()
	headings := map[string]map[string]bool{}
	var bad []string
	found := 0
	for _, f := range repoFiles(t) {
		text, ok := readText(t, f)
		if !ok {
			continue
		}
		for _, m := range pointerRE.FindAllStringSubmatch(text, -1) {
			doc := m[1]
			hs, ok := headings[doc]
			if !ok {
				hs = headingTitles(t, "docs/"+doc+".md")
				headings[doc] = hs
			}
			titles := []string{m[2]}
			for _, q := range quotedRE.FindAllStringSubmatch(m[3], -1) {
				titles = append(titles, q[1])
			}
			for _, title := range titles {
				found++
				if !hs[title] {
					bad = append(bad, f+": docs/"+doc+".md has no section "+`"`+title+`"`)
				}
			}
		}
	}
	require.Empty(t, bad, "a pointer names a section that does not exist")
	require.Greater(t, found, 40, "the pointer pattern found too few pointers: is pointerRE still right?")
}

// headingTitles returns the titles a pointer may use for the headings of the
// Markdown file rel: each heading's text, and its text before the first
// colon ("Input" for "Input: `OrderConfirmed` and `OrderCancelled`").
// Missing files have no headings.
func headingTitles(t *testing.T, rel string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		return map[string]bool{}
	}
	out := map[string]bool{}
	for _, h := range headings(string(b)) {
		out[h] = true
		if i := strings.Index(h, ":"); i > 0 {
			out[h[:i]] = true
		}
	}
	return out
}

// headings returns the text of the ATX headings of a Markdown document,
// outside code fences.
func headings(md string) []string {
	var hs []string
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if h != "" && h[0] == ' ' {
			hs = append(hs, strings.TrimSpace(h))
		}
	}
	return hs
}

// slug is the anchor GitHub gives a heading: lower case, letters, digits,
// spaces, hyphens and underscores kept, spaces turned into hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	var bad []string
	for _, f := range repoFiles(t) {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		text, _ := readText(t, f)
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			if msg := checkLink(t, f, text, m[1]); msg != "" {
				bad = append(bad, f+": "+m[1]+": "+msg)
			}
		}
	}
	require.Empty(t, bad, "Markdown links that do not resolve")
}

// checkLink checks one link target of the Markdown file from (whose text is
// text); "" means it resolves.
func checkLink(t *testing.T, from, text, target string) string {
	t.Helper()
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	rel := from
	if file != "" {
		rel = path.Join(path.Dir(from), file)
		if strings.HasPrefix(rel, "..") {
			return "points outside the repository"
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			if st, serr := os.Stat(filepath.Join(repoRoot, rel)); serr == nil && st.IsDir() {
				return ""
			}
			return "no such file"
		}
		text = string(b)
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	for _, h := range headings(text) {
		if slug(h) == anchor {
			return ""
		}
	}
	return "no heading with that anchor"
}
