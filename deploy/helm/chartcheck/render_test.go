// Package chartcheck renders the Helm chart deploy/helm/mailsvc with Helm's own Go packages
// (helm.sh/helm/v4: the chart loader, the values coalescing and the template engine that
// `helm install` and `helm template` run) and validates every object offline: strict decoding
// into the typed Kubernetes structs (k8s.io/api, and the Prometheus Operator's for the
// ServiceMonitor) with unknown and duplicate fields refused, then the values that matter
// (ports, probes, environment names against mailsvc's config keys, secrets only from the
// Secret). It is a module of its own so that Helm's and Kubernetes' dependencies stay out of
// mailsvc's go.mod; `make test` runs it (`make chart`).
package chartcheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root, from this directory (go test runs in it).
const repoRoot = "../../.."

// chartDir is the chart under test.
var chartDir = filepath.Join(repoRoot, "deploy", "helm", "mailsvc")

// mailsvcBin is cmd/mailsvc built once by TestMain, for `mailsvc config check`.
var mailsvcBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mailsvc-chartcheck-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartcheck:", err)
		os.Exit(1)
	}
	mailsvcBin = filepath.Join(dir, "mailsvc")
	// The main module's binary, built from the repository root (its own go.mod).
	cmd := exec.Command("go", "-C", repoRoot, "build", "-o", mailsvcBin, "./cmd/mailsvc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "chartcheck: go build ./cmd/mailsvc: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// scheme knows every built-in Kubernetes type and the Prometheus Operator's monitoring/v1.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), monitoringv1.AddToScheme(s)); err != nil {
		panic(err)
	}
	return s
}()

// strictYAML decodes YAML into the registered typed struct of its apiVersion and kind and
// refuses unknown fields, duplicate fields and unknown kinds: an offline check against the
// Kubernetes schemas as the API server's strict field validation would do it.
var strictYAML = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// release is what a render is given.
type release struct {
	name     string
	values   string // YAML over the chart's values.yaml
	monitor  bool   // the cluster serves monitoring.coreos.com/v1 ServiceMonitor
	revision int
}

// objects is a render's output, by "Kind/name".
type objects map[string]runtime.Object

func (o objects) keys() []string {
	var k []string
	for key := range o {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// render renders the chart as `helm template` would for r, in namespace shop, and decodes
// every object strictly.
func render(t *testing.T, r release) objects {
	t.Helper()
	out, err := renderFiles(r)
	require.NoError(t, err)
	objs := objects{}
	for name, text := range out {
		if !strings.HasSuffix(name, ".yaml") || strings.TrimSpace(text) == "" {
			continue
		}
		dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
		for {
			doc, err := dec.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, name)
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := strictYAML.Decode(doc, nil, nil)
			require.NoError(t, err, "%s: strict decoding into the typed Kubernetes struct:\n%s", name, doc)
			meta, ok := obj.(interface{ GetName() string })
			require.True(t, ok, name)
			key := gvk.Kind + "/" + meta.GetName()
			require.NotContains(t, objs, key, "%s rendered twice", key)
			objs[key] = obj
		}
	}
	return objs
}

// renderFiles renders the chart's templates for r with Helm's engine (strict: a template
// that reads a value the chart does not define fails).
func renderFiles(r release) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	overrides := map[string]any{}
	if err := yaml.Unmarshal([]byte(r.values), &overrides); err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	versions := slices.Clone(caps.APIVersions)
	if r.monitor {
		versions = append(versions, "monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor")
	}
	caps.APIVersions = versions
	rev := r.revision
	if rev == 0 {
		rev = 1
	}
	vals, err := util.ToRenderValues(ch, overrides, common.ReleaseOptions{
		Name: r.name, Namespace: "shop", Revision: rev, IsInstall: rev == 1, IsUpgrade: rev > 1,
	}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.RenderWithContext(context.Background(), ch, vals)
}

// chartMeta is the chart's Chart.yaml, loaded by Helm.
func chartMeta(t *testing.T) *chartv2.Metadata {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	return ch.Metadata
}

// stripComments drops comment lines, so that a document of comments alone counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}
