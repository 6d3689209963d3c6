package deploy_test

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, ...
	Args string
}

// stage is one FROM ... section of a multi-stage Dockerfile.
type stage struct {
	From         string
	Instructions []instruction
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// parseDockerfile splits the Dockerfile at the repository root into stages.
func parseDockerfile() ([]stage, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	var stages []stage
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		if in.Cmd == "FROM" {
			stages = append(stages, stage{From: in.Args})
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
		}
	}
	if len(stages) < 2 {
		return nil, fmt.Errorf("Dockerfile: want a multi-stage build, found %d stages", len(stages))
	}
	return stages, nil
}

// goBuild is the Dockerfile's `go build` of cmd/mailsvc.
type goBuild struct {
	Env     []string // e.g. CGO_ENABLED=0
	Flags   []string // e.g. -trimpath
	LDFlags string   // with ${VERSION} and ${COMMIT} expanded to testVersion and testCommit
}

var (
	goBuildRE = regexp.MustCompile(`((?:[A-Z_]+=\S+\s+)*)go build ((?:-[a-z]+\s+)*)-ldflags\s+"([^"]*)"\s+-o\s+\S+\s+\./cmd/mailsvc\b`)
	flagRE    = regexp.MustCompile(`-[a-z]+`)
)

// dockerBuild finds the `go build ... ./cmd/mailsvc` in the build stage's RUN instructions.
func dockerBuild() (goBuild, error) {
	stages, err := parseDockerfile()
	if err != nil {
		return goBuild{}, err
	}
	for _, st := range stages[:len(stages)-1] {
		for _, in := range st.all("RUN") {
			m := goBuildRE.FindStringSubmatch(in.Args)
			if m == nil {
				continue
			}
			ld := os.Expand(m[3], func(k string) string {
				return map[string]string{"VERSION": testVersion, "COMMIT": testCommit}[k]
			})
			return goBuild{Env: strings.Fields(m[1]), Flags: flagRE.FindAllString(m[2], -1), LDFlags: ld}, nil
		}
	}
	return goBuild{}, fmt.Errorf("Dockerfile: no `go build ... -ldflags \"...\" -o ... ./cmd/mailsvc` in a build stage")
}

// run builds cmd/mailsvc to out with the Dockerfile's environment and flags.
func (b goBuild) run(out string) error {
	goCmd, err := goCommand()
	if err != nil {
		return err
	}
	args := append([]string{"build"}, b.Flags...)
	args = append(args, "-ldflags", b.LDFlags, "-o", out, "./cmd/mailsvc")
	_, err = run(repoRoot, goCmd, append(envWithout("CGO_ENABLED=", "GOFLAGS="), b.Env...), args...)
	return err
}

func TestDockerfileBuildFlags(t *testing.T) {
	t.Parallel()
	b, err := dockerBuild()
	require.NoError(t, err)
	require.Contains(t, b.Env, "CGO_ENABLED=0", "static build: no cgo")
	require.Contains(t, b.Flags, "-trimpath")
	for _, v := range []string{"Version=" + testVersion, "Commit=" + testCommit} {
		require.Contains(t, b.LDFlags, "-X github.com/mailsvc/mailsvc/internal/buildinfo."+v,
			"the image's `mailsvc version` must show the build arguments VERSION and COMMIT")
	}
}

func TestDockerfileFinalStage(t *testing.T) {
	t.Parallel()
	stages, err := parseDockerfile()
	require.NoError(t, err)
	final := stages[len(stages)-1]
	require.True(t, strings.HasPrefix(final.From, "gcr.io/distroless/static") || final.From == "scratch",
		"final image %q: distroless static (CA certificates, tzdata) or scratch", final.From)

	users := final.all("USER")
	require.Len(t, users, 1)
	uid, _, _ := strings.Cut(users[0].Args, ":")
	n, err := strconv.Atoi(uid)
	require.NoError(t, err, "USER must be numeric so Kubernetes runAsNonRoot can verify it")
	require.NotZero(t, n, "the image must not run as root")

	requireExecForm(t, final, "ENTRYPOINT", []string{"mailsvc"})
	requireExecForm(t, final, "CMD", []string{"serve"})

	copies := final.all("COPY")
	require.NotEmpty(t, copies)
	require.Regexp(t, `--from=\S+ .*/mailsvc .*/usr/local/bin/$`, copies[0].Args, "mailsvc lands on PATH")

	expose := final.all("EXPOSE")
	require.Len(t, expose, 1)
	cfg := loadConfig(t, "", map[string]string{"MAILSVC_MAIL_FROM": "Shop <orders@shop.example>"})
	require.Equal(t, portOf(t, cfg.HTTP.Addr), expose[0].Args, "EXPOSE is http.addr's default port")

	hc := final.all("HEALTHCHECK")
	require.Len(t, hc, 1)
	require.Contains(t, hc[0].Args, `CMD ["/usr/local/bin/healthprobe", "/healthz"]`)
	require.Contains(t, copies[0].Args, "/healthprobe", "the health check's probe is in the image")
}

func requireExecForm(t *testing.T, st stage, cmd string, want []string) {
	t.Helper()
	ins := st.all(cmd)
	require.Len(t, ins, 1, cmd)
	var got []string
	require.NoError(t, json.Unmarshal([]byte(ins[0].Args), &got), "%s must be in exec (JSON) form", cmd)
	require.Equal(t, want, got, cmd)
}

// TestDockerfileBinary builds cmd/mailsvc with the Dockerfile's flags, checks that the result
// is a static binary built without cgo and with -trimpath, and that `mailsvc version` shows
// the injected version and commit.
func TestDockerfileBinary(t *testing.T) {
	t.Parallel()
	bin := mailsvcBinary(t)

	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "a static binary links no shared library")

	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	require.Equal(t, "0", settings["CGO_ENABLED"])
	require.Equal(t, "true", settings["-trimpath"])

	out, err := run(repoRoot, bin, envWithout("MAILSVC_"), "version")
	require.NoError(t, err)
	require.Regexp(t, `^mailsvc `+regexp.QuoteMeta(testVersion)+` \(commit `+testCommit+`, go1\.\d+(\.\d+)?\)\n$`, out)
}
