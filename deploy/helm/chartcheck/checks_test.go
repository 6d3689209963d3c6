package chartcheck

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// requirePod checks a mailsvc pod: one container, the image named in full, the args, the
// environment (MAILSVC_* names of config keys, secrets from the Secret only), non-root with a
// read-only root, no API token, the ConfigMap mounted where MAILSVC_CONFIG says.
func requirePod(t *testing.T, objs objects, pod corev1.PodSpec, configMap string, args []string) *corev1.Container {
	t.Helper()
	require.Len(t, pod.Containers, 1)
	c := &pod.Containers[0]
	require.True(t, fullyQualified(c.Image), "image %s names its registry", c.Image)
	if !strings.HasPrefix(c.Image, "ghcr.io/") {
		require.Equal(t, defaultImage, c.Image)
	}
	require.Empty(t, c.Command, "the image's ENTRYPOINT [mailsvc]")
	require.Equal(t, args, c.Args)

	refs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			require.NotNil(t, ref, "%s comes from a Secret", e.Name)
			require.Equal(t, "mailsvc", ref.Name)
			refs[e.Name] = fmt.Sprintf("%s optional=%t", ref.Key, ref.Optional != nil && *ref.Optional)
			continue
		}
		_, secret := secretRefs[e.Name]
		require.False(t, secret, "%s is a secret: never a plain value", e.Name)
	}
	want := map[string]string{}
	for env, r := range secretRefs {
		want[env] = fmt.Sprintf("%s optional=%t", r.key, r.optional)
	}
	require.Equal(t, want, refs)

	sc := pod.SecurityContext
	require.True(t, *sc.RunAsNonRoot)
	require.Equal(t, int64(65532), *sc.RunAsUser)
	require.False(t, *pod.AutomountServiceAccountToken)
	require.Equal(t, "mailsvc", strings.TrimPrefix(pod.ServiceAccountName, "shop-"))
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		require.False(t, req.IsZero(), "requests %s", res)
		require.False(t, lim.IsZero(), "limits %s", res)
	}

	dir, file := filepath.Split(envValue(c, "MAILSVC_CONFIG"))
	require.Equal(t, "mailsvc.yaml", file)
	require.Len(t, c.VolumeMounts, 1)
	require.Equal(t, filepath.Clean(dir), c.VolumeMounts[0].MountPath)
	require.True(t, c.VolumeMounts[0].ReadOnly)
	require.Len(t, pod.Volumes, 1)
	require.Equal(t, c.VolumeMounts[0].Name, pod.Volumes[0].Name)
	require.Equal(t, configMap, pod.Volumes[0].ConfigMap.Name)
	require.Contains(t, objs, "ConfigMap/"+configMap)
	return c
}

func requireProbes(t *testing.T, c *corev1.Container) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		require.NotNil(t, p, name)
		require.Equal(t, name, p.HTTPGet.Path)
		require.Equal(t, "http", p.HTTPGet.Port.String())
	}
	require.Equal(t, "/healthz", c.StartupProbe.HTTPGet.Path)
	require.Equal(t, "http", c.StartupProbe.HTTPGet.Port.String())
}

// requireConfigCheck runs `mailsvc config check` on the rendered config file with the pod's
// environment (placeholder secrets, the roles of its --roles), which loads and validates it
// as serve would; then every MAILSVC_* variable of the pod must name a key it printed.
func requireConfigCheck(t *testing.T, objs objects, configMap string, c *corev1.Container, roles string) {
	t.Helper()
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap/"+configMap)
	file := filepath.Join(t.TempDir(), "mailsvc.yaml")
	require.NoError(t, os.WriteFile(file, []byte(cm.Data["mailsvc.yaml"]), 0o600))
	env := []string{"PATH=" + os.Getenv("PATH"), "MAILSVC_CONFIG=" + file}
	for _, e := range c.Env {
		switch {
		case e.Name == "MAILSVC_CONFIG":
		case e.ValueFrom != nil:
			if v, ok := placeholders[e.Name]; ok {
				env = append(env, e.Name+"="+v)
			}
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if roles != "" {
		env = append(env, "MAILSVC_SERVE_ROLES="+roles) // the flag is validated as the key is
	}
	cmd := exec.Command(mailsvcBin, "config", "check")
	cmd.Env = env
	out, err := cmd.Output()
	require.NoError(t, err, "mailsvc config check: %s", errOutput(err))
	printed := map[string]any{}
	require.NoError(t, yaml.Unmarshal(out, &printed))
	known := map[string]bool{}
	for _, k := range flatKeys("", printed) {
		known["MAILSVC_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = true
	}
	require.Contains(t, known, "MAILSVC_DATABASE_URL", "config check printed the keys")
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "MAILSVC_") && e.Name != "MAILSVC_CONFIG" {
			require.True(t, known[e.Name], "%s names no config key", e.Name)
		}
	}
}

func errOutput(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// configFile is the rendered config file of the ConfigMap name.
func configFile(t *testing.T, objs objects, name string) map[string]any {
	t.Helper()
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap/"+name)
	require.Equal(t, []string{"mailsvc.yaml"}, slices.Collect(maps.Keys(cm.Data)))
	cfg := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["mailsvc.yaml"]), &cfg))
	return cfg
}

// flatKeys lists the dotted keys of the leaves of m (a list is a leaf), sorted.
func flatKeys(prefix string, m map[string]any) []string {
	var keys []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			keys = append(keys, flatKeys(prefix+k+".", sub)...)
			continue
		}
		keys = append(keys, prefix+k)
	}
	slices.Sort(keys)
	return keys
}

func ports(c *corev1.Container) map[string]int32 {
	p := map[string]int32{}
	for _, cp := range c.Ports {
		p[cp.Name] = cp.ContainerPort
	}
	return p
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func selects(selector, lbls map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(lbls))
}

// requireCovers checks pdb selects the pods of d and of none of others.
func requireCovers(t *testing.T, pdb *policyv1.PodDisruptionBudget, d *appsv1.Deployment, others ...*appsv1.Deployment) {
	t.Helper()
	require.True(t, selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels), "%s covers %s", pdb.Name, d.Name)
	for _, o := range others {
		require.False(t, selects(pdb.Spec.Selector.MatchLabels, o.Spec.Template.Labels), "%s covers %s", pdb.Name, o.Name)
	}
	require.Less(t, pdb.Spec.MinAvailable.IntValue(), int(*d.Spec.Replicas), "a drain can evict one pod of %s", d.Name)
}

// fullyQualified: the image's first path element is a registry host (podman refuses short names).
func fullyQualified(image string) bool {
	host, rest, ok := strings.Cut(image, "/")
	return ok && rest != "" && (strings.ContainsAny(host, ".:") || host == "localhost")
}

func readRepo(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	require.NoError(t, err)
	return b
}
