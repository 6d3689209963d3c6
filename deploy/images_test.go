package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// fullyQualified reports whether image names its registry: podman and buildah refuse a short
// name such as postgres:16 (short-name-mode enforcing) where Docker assumes docker.io. The
// first path element must be a host: it has a dot or a port, or is localhost.
func fullyQualified(image string) bool {
	host, rest, ok := strings.Cut(image, "/")
	if !ok || rest == "" {
		return false
	}
	return strings.ContainsAny(host, ".:") || host == "localhost"
}

func TestFullyQualified(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]bool{
		"docker.io/library/postgres:16": true, "gcr.io/distroless/static-debian12:nonroot": true,
		"localhost/mailsvc:dev": true, "registry.example.com:5000/shop/mailsvc:v1": true,
		"postgres:16": false, "axllent/mailpit:v1.33.1": false, "mailsvc": false, "library/golang:1.26": false,
	} {
		require.Equal(t, want, fullyQualified(image), image)
	}
}

// TestImageNamesFullyQualified checks every image the repository names: the Dockerfile's
// FROM lines, the compose file's services, the images the Kubernetes manifests render to, and
// the image references in the docs' and the Dockerfile's commands (docker|podman build -t,
// run, pull). The Helm chart's images are checked by deploy/helm/chartcheck.
func TestImageNamesFullyQualified(t *testing.T) {
	t.Parallel()
	stages, err := parseDockerfile()
	require.NoError(t, err)
	for _, st := range stages {
		from := strings.Fields(st.From)[0]
		from = strings.ReplaceAll(from, "${GO_VERSION}", "1.26")
		require.True(t, fullyQualified(from), "Dockerfile: FROM %s is a short name", from)
	}

	c := loadCompose(t)
	for name, s := range c.Services {
		require.True(t, fullyQualified(s.Image), "compose service %s: image %s is a short name", name, s.Image)
	}

	for _, dir := range []string{"kubernetes", "kubernetes-split"} {
		for _, o := range renderObjects(t, dir) {
			var holder struct {
				Spec struct {
					Template podTemplate `yaml:"template"`
				} `yaml:"spec"`
			}
			require.NoError(t, o.Node.Decode(&holder))
			for _, ctr := range holder.Spec.Template.Spec.Containers {
				require.True(t, fullyQualified(ctr.Image), "deploy/%s: %s %s runs %s, a short name", dir, o.Kind, o.Metadata.Name, ctr.Image)
			}
		}
	}

	// Commands in the docs and comments: `docker build -t NAME`, `podman run ... NAME version`.
	cmdRE := regexp.MustCompile(`\b(?:docker|podman) (?:build|run|pull|push|tag)\b[^\n]*`)
	imageRE := regexp.MustCompile(`(?:^|\s)((?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9._-]+(?:/[a-z0-9._-]+)*:[A-Za-z0-9._${}:-]+)(?:\s|$)`)
	files := []string{"Dockerfile", "README.md", "deploy/compose.yaml", "Makefile"}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		files = append(files, strings.TrimPrefix(d, repoRoot+"/"))
	}
	scripts, err := filepath.Glob(filepath.Join(repoRoot, "scripts", "*.sh"))
	require.NoError(t, err)
	for _, s := range scripts {
		files = append(files, strings.TrimPrefix(s, repoRoot+"/"))
	}
	var checked int
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		require.NoError(t, err)
		for _, cmd := range cmdRE.FindAllString(string(b), -1) {
			for _, m := range imageRE.FindAllStringSubmatch(cmd, -1) {
				img := m[1]
				if strings.HasPrefix(img, "-") || strings.Contains(img, "://") {
					continue
				}
				checked++
				require.True(t, fullyQualified(img), "%s: %q names the short image %s", f, strings.TrimSpace(cmd), img)
			}
		}
	}
	require.Positive(t, checked, "the docs show at least one build or run command")
}

// TestHelmChartImageDefault checks the chart's default image names its registry (the chart's
// rendered objects are checked in deploy/helm/chartcheck).
func TestHelmChartImageDefault(t *testing.T) {
	t.Parallel()
	var v struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	}
	require.NoError(t, yaml.Unmarshal(readFile(t, "deploy/helm/mailsvc/values.yaml"), &v))
	require.True(t, fullyQualified(v.Image.Repository+":x"), v.Image.Repository)
}
