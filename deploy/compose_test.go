package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/config"
)

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	User            string            `yaml:"user"`
	ReadOnly        bool              `yaml:"read_only"`
	CapDrop         []string          `yaml:"cap_drop"`
	SecurityOpt     []string          `yaml:"security_opt"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	Restart         string            `yaml:"restart"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Healthcheck     *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	require.NoError(t, yaml.Unmarshal(readFile(t, "deploy/compose.yaml"), &c))
	return c
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	// scripts/services.sh starts postgres and rabbitmq by these names.
	require.ElementsMatch(t, []string{"postgres", "rabbitmq", "mailpit", "migrate", "mailsvc"}, slices.Collect(maps.Keys(c.Services)))
	require.Contains(t, c.Services["rabbitmq"].Image, "-management", "RabbitMQ with the management plugin")

	// The servers the tests and configs/dev.yaml expect, on loopback only.
	require.Contains(t, c.Services["postgres"].Ports, "127.0.0.1:5432:5432")
	require.Contains(t, c.Services["rabbitmq"].Ports, "127.0.0.1:5672:5672")
	require.Contains(t, c.Services["mailpit"].Ports, "127.0.0.1:1025:1025")
	for name, s := range c.Services {
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond loopback", name, p)
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				_, err := os.Stat(filepath.Join(repoRoot, "deploy", src))
				require.NoError(t, err, "%s mounts %s", name, src)
			} else {
				require.Contains(t, c.Volumes, src, "%s uses an undeclared volume", name)
			}
		}
	}
}

func TestComposeHealthAndOrder(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	// Images with a shell: podman-compose 1.0.3 runs any health check as /bin/sh -c '...'.
	for _, name := range []string{"postgres", "rabbitmq", "mailpit"} {
		hc := c.Services[name].Healthcheck
		require.NotNil(t, hc, "%s has a health check", name)
		require.Equal(t, "CMD", hc.Test[0], "%s: exec-form health check", name)
	}
	// The mailsvc image has no shell: its health check is the image's own exec-form
	// HEALTHCHECK (healthprobe), never one in the compose file.
	for _, name := range []string{"migrate", "mailsvc"} {
		require.Nil(t, c.Services[name].Healthcheck, "%s: a compose health check would need /bin/sh under podman-compose", name)
	}

	want := map[string]map[string]string{
		"migrate": {"postgres": "service_healthy"},
		"mailsvc": {"migrate": "service_completed_successfully", "rabbitmq": "service_healthy", "mailpit": "service_healthy"},
	}
	for name, deps := range want {
		got := map[string]string{}
		for dep, d := range c.Services[name].DependsOn {
			got[dep] = d.Condition
		}
		require.Equal(t, deps, got, "%s depends_on", name)
	}
	// Where depends_on's conditions are not waited for (podman-compose 1.0.3), migrate retries
	// until PostgreSQL accepts and serve restarts until the migrations are applied.
	require.Equal(t, "on-failure", c.Services["migrate"].Restart, "migrate is one-shot, retried until it succeeds")
	require.Equal(t, "unless-stopped", c.Services["mailsvc"].Restart)
}

// TestComposeMailsvc checks the two services that run the image: image and command, the
// environment (only config keys' variables, and it loads and validates), the `make run`
// settings of configs/dev.yaml, non-root with a read-only root, ports and stop grace.
func TestComposeMailsvc(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	migrate, serve := c.Services["migrate"], c.Services["mailsvc"]
	require.Equal(t, []string{"migrate"}, migrate.Command)
	require.Equal(t, []string{"serve"}, serve.Command)
	require.Equal(t, serve.Image, migrate.Image, "migrate runs the same image")
	require.Equal(t, serve.Environment, migrate.Environment, "migrate sees the same config")

	for name, s := range map[string]composeService{"migrate": migrate, "mailsvc": serve} {
		require.NotNil(t, s.Build, "%s builds the image", name)
		_, err := os.Stat(filepath.Join(repoRoot, "deploy", s.Build.Context, s.Build.Dockerfile))
		require.NoError(t, err, "%s: build context and Dockerfile", name)
		require.Contains(t, s.Build.Args, "VERSION")
		require.Contains(t, s.Build.Args, "COMMIT")
		require.Equal(t, "65532:65532", s.User, "%s runs as the image's non-root user", name)
		require.True(t, s.ReadOnly, "%s has a read-only root filesystem", name)
		require.Equal(t, []string{"ALL"}, s.CapDrop, name)
		require.Contains(t, s.SecurityOpt, "no-new-privileges:true", name)
		requireKnownEnv(t, "compose service "+name, slices.Collect(maps.Keys(s.Environment)))
	}

	cfg := loadConfig(t, "", serve.Environment)
	require.Equal(t, "mailpit", cfg.SMTP.Host)
	require.Contains(t, cfg.Database.URL.Reveal(), "@postgres:5432/")
	require.Contains(t, cfg.AMQP.URL.Reveal(), "@rabbitmq:5672/")
	require.Contains(t, serve.Ports, "127.0.0.1:8080:"+portOf(t, cfg.HTTP.Addr))

	// The stack `make run` gives: every setting of configs/dev.yaml is set here too, but the
	// console's: its logins are lists of records, which no variable carries, so the compose
	// stack leaves the console off (docs/console.md: mount a config file to turn it on).
	for _, k := range yamlKeys(t, readFile(t, "configs/dev.yaml")) {
		if strings.HasPrefix(k, "console.") {
			continue
		}
		require.Contains(t, serve.Environment, config.EnvName(k), "configs/dev.yaml sets %s", k)
	}

	grace, err := time.ParseDuration(serve.StopGracePeriod)
	require.NoError(t, err)
	require.Greater(t, grace, app.ShutdownBound(cfg),
		"stop_grace_period must outlast the longest stop of mailsvc serve (app.ShutdownBound)")
}
