// Package deploy_test checks the deployment files against the service they deploy: the
// Dockerfile's build flags (by building the binary with them), the compose stack and the
// Kubernetes manifests (image, command, probes, ports, env names, resources, non-root), and
// that every metric the alert rules and the Grafana dashboard name is one a running
// `mailsvc serve` exports. There is no Docker engine or cluster here: these tests, promtool
// (scripts/promtool.sh) and kustomize (its Go library) are what keep the files correct.
package deploy_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/config"
)

// repoRoot is the repository root, relative to this package's directory (go test runs
// tests in the package directory).
const repoRoot = ".."

// testVersion and testCommit are injected into the test build through the Dockerfile's
// own -ldflags, with its ${VERSION} and ${COMMIT} build arguments set to these.
const (
	testVersion = "v9.8.7-deploytest"
	testCommit  = "0123abcd"
)

// binDir holds the binary built once for the whole package run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mailsvc-deploytest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy test:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// mailsvcBinary builds cmd/mailsvc once, with exactly the environment, flags and -ldflags of
// the Dockerfile's `go build` (version and commit set to testVersion and testCommit), and
// returns its path.
func mailsvcBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		b, err := dockerBuild()
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(binDir, "mailsvc")
		buildErr = b.run(buildPath)
	})
	require.NoError(t, buildErr)
	return buildPath
}

// goCommand returns the go command that runs this test.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the go command is not on PATH (needed to build mailsvc like the Dockerfile does)")
	}
	return p, nil
}

// run executes name with args in the repository root and returns its combined output.
func run(dir, name string, env []string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// envWithout returns os.Environ() minus every variable whose name starts with one of prefixes,
// so a child process sees only the MAILSVC_* settings the test gives it.
func envWithout(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			env = append(env, kv)
		}
	}
	return env
}

// readFile returns the content of a file given relative to the repository root.
func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	require.NoError(t, err)
	return b
}

// yamlKeys returns the dotted paths of every leaf of a YAML mapping document (a config file's
// keys: "sender.lease", "amqp.binding_keys").
func yamlKeys(t *testing.T, doc []byte) []string {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &m))
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if mm, ok := v.(map[string]any); ok {
			for k, vv := range mm {
				walk(strings.TrimPrefix(prefix+"."+k, "."), vv)
			}
			return
		}
		keys = append(keys, prefix)
	}
	walk("", m)
	slices.Sort(keys)
	return keys
}

// configEnvNames maps every MAILSVC_* variable the service reads to its config key, plus
// MAILSVC_CONFIG (the config file path, read by the CLI).
func configEnvNames() map[string]string {
	names := map[string]string{"MAILSVC_CONFIG": ""}
	for _, k := range config.Keys() {
		names[config.EnvName(k)] = k
	}
	return names
}

// requireKnownEnv fails for a MAILSVC_* name that no config key has: the service would
// silently ignore it.
func requireKnownEnv(t *testing.T, where string, names []string) {
	t.Helper()
	known := configEnvNames()
	for _, n := range names {
		if !strings.HasPrefix(n, config.EnvPrefix+"_") {
			continue
		}
		_, ok := known[n]
		require.Truef(t, ok, "%s sets %s, which is no config key's variable (internal/config defaults.go)", where, n)
	}
}

// loadConfig loads the config as the service would, from file (none when "") and env.
func loadConfig(t *testing.T, file string, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Load(file, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err, "the config the deployment gives mailsvc must load and validate")
	return cfg
}

// portOf returns the port of a Go listen address such as ":8080".
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "http.addr %q", addr)
	return port
}

// syncBuffer is a bytes.Buffer safe for a child process's output and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)
