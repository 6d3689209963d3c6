// Package composecheck loads deploy/compose.yaml with compose-go, the loader of Docker Compose
// v2 itself (the Compose Specification's schema, interpolation, anchors and merges), so that a
// file Docker Compose would refuse fails here, on a machine without Docker. It is a module of
// its own to keep compose-go's dependencies out of mailsvc's go.mod; `make test` runs it
// (`make compose-check`). deploy/compose_test.go checks the file against mailsvc's config.
package composecheck

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

func load(t *testing.T) *types.Project {
	t.Helper()
	file, err := filepath.Abs("../compose.yaml")
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithName(""), cli.WithWorkingDirectory(filepath.Dir(file)))
	require.NoError(t, err)
	p, err := opts.LoadProject(context.Background())
	require.NoError(t, err, "docker compose -f deploy/compose.yaml config")
	return p
}

// TestComposeLoads: the file is valid Compose, with the services, images and start order
// deploy/compose_test.go and docs/deploying.md describe.
func TestComposeLoads(t *testing.T) {
	t.Parallel()
	p := load(t)
	require.Equal(t, "mailsvc", p.Name)
	require.ElementsMatch(t, []string{"postgres", "rabbitmq", "mailpit", "migrate", "mailsvc"}, p.ServiceNames())
	for name, s := range p.Services {
		host, _, ok := strings.Cut(s.Image, "/")
		require.True(t, ok && (strings.Contains(host, ".") || host == "localhost"), "%s: image %s names its registry", name, s.Image)
	}
	require.Equal(t, "localhost/mailsvc:dev", p.Services["mailsvc"].Image)
	require.Equal(t, p.Services["mailsvc"].Image, p.Services["migrate"].Image)

	for _, name := range []string{"migrate", "mailsvc"} {
		s := p.Services[name]
		require.Nil(t, s.HealthCheck, "%s: no compose health check (podman-compose 1.0.3 runs it through /bin/sh)", name)
		require.NotNil(t, s.Build, name)
		require.Equal(t, "65532:65532", s.User, name)
		require.True(t, s.ReadOnly, name)
		require.Equal(t, []string{"ALL"}, s.CapDrop, name)
	}
	require.Equal(t, "on-failure", p.Services["migrate"].Restart)
	require.Equal(t, "unless-stopped", p.Services["mailsvc"].Restart)
	require.Equal(t, types.ServiceConditionHealthy, p.Services["migrate"].DependsOn["postgres"].Condition)
	deps := p.Services["mailsvc"].DependsOn
	require.Equal(t, types.ServiceConditionCompletedSuccessfully, deps["migrate"].Condition)
	require.Equal(t, types.ServiceConditionHealthy, deps["rabbitmq"].Condition)
	require.Equal(t, types.ServiceConditionHealthy, deps["mailpit"].Condition)
	for _, name := range []string{"postgres", "rabbitmq", "mailpit"} {
		hc := p.Services[name].HealthCheck
		require.NotNil(t, hc, name)
		require.Equal(t, "CMD", hc.Test[0], name)
	}
}
