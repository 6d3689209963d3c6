package deploy_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/config"
)

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sObject struct {
	APIVersion string    `yaml:"apiVersion"`
	Kind       string    `yaml:"kind"`
	Metadata   k8sMeta   `yaml:"metadata"`
	Node       yaml.Node `yaml:"-"`
}

type podTemplate struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     podSpec `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName            string `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool  `yaml:"automountServiceAccountToken"`
	TerminationGracePeriodSeconds *int64 `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string `yaml:"restartPolicy"`
	SecurityContext               struct {
		RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
		RunAsUser    *int64 `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env       []envVar `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	StartupProbe   *probe `yaml:"startupProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

// rendered is the output of `kustomize build deploy/kubernetes`, by kind (one object each),
// but the Services: "Service" is the metrics Service mailsvc, "Service/NAME" any other.
type rendered map[string]k8sObject

// renderedKey is o's key in rendered.
func renderedKey(o k8sObject) string {
	if o.Kind == "Service" && o.Metadata.Name != "mailsvc" {
		return o.Kind + "/" + o.Metadata.Name
	}
	return o.Kind
}

func (r rendered) spec(t *testing.T, kind string, v any) {
	t.Helper()
	obj, ok := r[kind]
	require.True(t, ok, "the kustomization renders a %s", kind)
	var holder struct {
		Spec yaml.Node `yaml:"spec"`
		Data yaml.Node `yaml:"data"`
	}
	require.NoError(t, obj.Node.Decode(&holder))
	node := &holder.Spec
	if kind == "ConfigMap" {
		node = &holder.Data
	}
	require.NoError(t, node.Decode(v), kind)
}

// renderKustomization renders deploy/kubernetes with kustomize's own Go library
// (sigs.k8s.io/kustomize/api, the code behind `kubectl kustomize` and `kubectl apply -k`), so
// the checks see what a cluster would be sent (generated ConfigMap names, image overrides,
// labels) without any tool installed.
func renderKustomization(t *testing.T) rendered {
	t.Helper()
	return byKey(t, renderObjects(t, "kubernetes"))
}

// byKey indexes objs by renderedKey, one object each.
func byKey(t *testing.T, objs []k8sObject) rendered {
	t.Helper()
	r := rendered{}
	for _, o := range objs {
		require.NotContains(t, r, renderedKey(o), "one %s expected", renderedKey(o))
		r[renderedKey(o)] = o
	}
	return r
}

// renderObjects renders the kustomization in deploy/dir and returns its objects in order.
func renderObjects(t *testing.T, dir string) []k8sObject {
	t.Helper()
	return renderPath(t, filepath.Join(repoRoot, "deploy", dir))
}

// renderPath renders the kustomization in dir and returns its objects in order.
func renderPath(t *testing.T, dir string) []k8sObject {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).
		Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	yml, err := resMap.AsYaml()
	require.NoError(t, err)
	var objs []k8sObject
	dec := yaml.NewDecoder(strings.NewReader(string(yml)))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var o k8sObject
		require.NoError(t, node.Decode(&o))
		o.Node = node
		objs = append(objs, o)
	}
	return objs
}

// kustomizeImage returns the image the images: entry of the image component
// (deploy/kubernetes/image, shared by the base and the split overlay) sets for "mailsvc".
func kustomizeImage(t *testing.T) string {
	t.Helper()
	var k struct {
		Images []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		} `yaml:"images"`
	}
	require.NoError(t, yaml.Unmarshal(readFile(t, "deploy/kubernetes/image/kustomization.yaml"), &k))
	require.Len(t, k.Images, 1)
	require.Equal(t, "mailsvc", k.Images[0].Name)
	require.True(t, strings.HasSuffix(k.Images[0].NewName, "/mailsvc"), k.Images[0].NewName)
	require.NotEmpty(t, k.Images[0].NewTag)
	require.NotEqual(t, "latest", k.Images[0].NewTag, "pin a release, not latest")
	return k.Images[0].NewName + ":" + k.Images[0].NewTag
}

// secretEnv is what the manifests must take from the Secret, by config key.
var secretEnv = map[string]string{
	"database.url":   "database-url",
	"amqp.url":       "amqp-url",
	"smtp.password":  "smtp-password",
	"resend.api_key": "resend-api-key",
	// Needed only with webhooks.addr set.
	"webhooks.resend_secret": "resend-webhook-secret",
	// Needed only with bounces.address set.
	"bounces.secret": "bounce-secret",
}

// k8sConfig writes the rendered ConfigMap's mailsvc.yaml to a file and loads it as the pods
// would, with placeholder secrets in the environment.
func k8sConfig(t *testing.T, r rendered) (cfgFile string, keys []string) {
	t.Helper()
	var data map[string]string
	r.spec(t, "ConfigMap", &data)
	require.Equal(t, []string{"mailsvc.yaml"}, slices.Collect(maps.Keys(data)))
	require.Equal(t, string(readFile(t, "deploy/kubernetes/config/mailsvc.yaml")), data["mailsvc.yaml"])
	cfgFile = filepath.Join(t.TempDir(), "mailsvc.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(data["mailsvc.yaml"]), 0o600))
	return cfgFile, yamlKeys(t, []byte(data["mailsvc.yaml"]))
}

// TestKubernetesConfigMap checks the ConfigMap is configs/mailsvc.yaml's key set minus the
// secrets, and that it loads and validates with the secrets from the environment.
func TestKubernetesConfigMap(t *testing.T) {
	t.Parallel()
	r := renderKustomization(t)
	file, keys := k8sConfig(t, r)
	want := slices.DeleteFunc(yamlKeys(t, readFile(t, "configs/mailsvc.yaml")), func(k string) bool {
		_, secret := secretEnv[k]
		return secret
	})
	require.Equal(t, want, keys, "deploy/kubernetes/config/mailsvc.yaml must keep every key of configs/mailsvc.yaml but the secrets")
	cfg := loadConfig(t, file, map[string]string{
		"MAILSVC_DATABASE_URL": "postgres://mailsvc:pw@db:5432/mailsvc", "MAILSVC_AMQP_URL": "amqp://mailsvc:pw@mq:5672/",
	})
	require.Equal(t, "starttls", cfg.SMTP.TLS, "production SMTP requires TLS")
}

func TestKubernetesDeployment(t *testing.T) {
	t.Parallel()
	r := renderKustomization(t)
	file, _ := k8sConfig(t, r)
	cfg := loadConfig(t, file, map[string]string{"MAILSVC_DATABASE_URL": "postgres://db/mailsvc", "MAILSVC_AMQP_URL": "amqp://mq/"})
	var d struct {
		Replicas int                                     `yaml:"replicas"`
		Selector struct{ MatchLabels map[string]string } `yaml:"selector"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template podTemplate `yaml:"template"`
	}
	r.spec(t, "Deployment", &d)
	require.Equal(t, 2, d.Replicas)
	require.Equal(t, "RollingUpdate", d.Strategy.Type)
	require.Equal(t, 0, d.Strategy.RollingUpdate.MaxUnavailable, "a rollout never drops below the replica count")
	require.Subset(t, d.Template.Metadata.Labels, d.Selector.MatchLabels)

	pod := d.Template.Spec
	requirePod(t, "Deployment", pod, []string{"serve"}, r)
	c := pod.Containers[0]
	require.Len(t, c.Ports, 2)
	require.Equal(t, "http", c.Ports[0].Name)
	require.Equal(t, portOf(t, cfg.HTTP.Addr), strconv.Itoa(c.Ports[0].ContainerPort), "containerPort is http.addr's port")
	require.Equal(t, "webhooks", c.Ports[1].Name)
	require.Equal(t, 8081, c.Ports[1].ContainerPort, "the webhook port, for webhooks.addr \":8081\"")
	require.Empty(t, cfg.Webhooks.Addr, "webhooks are off until the Secret has their signing secret")
	require.Contains(t, string(readFile(t, "deploy/kubernetes/config/mailsvc.yaml")), `addr: ""                      # ":8081" for Resend's webhooks`,
		"the config names the port the Deployment declares")
	for name, pr := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		require.NotNil(t, pr, "%s probe", name)
		require.NotNil(t, pr.HTTPGet, "%s probe is an HTTP GET", name)
		require.Equal(t, "http", pr.HTTPGet.Port, "%s probe port", name)
	}
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.StartupProbe.HTTPGet.Path)

	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, app.ShutdownBound(cfg),
		"terminationGracePeriodSeconds must outlast the longest stop of mailsvc serve (app.ShutdownBound)")
}

func TestKubernetesMigrateJob(t *testing.T) {
	t.Parallel()
	r := renderKustomization(t)
	var j struct {
		BackoffLimit *int        `yaml:"backoffLimit"`
		Template     podTemplate `yaml:"template"`
	}
	r.spec(t, "Job", &j)
	require.NotNil(t, j.BackoffLimit)
	require.Contains(t, []string{"OnFailure", "Never"}, j.Template.Spec.RestartPolicy)
	requirePod(t, "Job", j.Template.Spec, []string{"migrate"}, r)
}

// requirePod checks what the Deployment and the Job share: the image, the command, env names,
// resources, non-root with a read-only root, no service account token, and the config file
// mounted where MAILSVC_CONFIG says.
func requirePod(t *testing.T, kind string, pod podSpec, args []string, r rendered) {
	t.Helper()
	require.Len(t, pod.Containers, 1, kind)
	c := pod.Containers[0]
	require.Equal(t, kustomizeImage(t), c.Image, "%s image", kind)
	require.Empty(t, c.Command, "%s keeps the image's ENTRYPOINT [mailsvc]", kind)
	require.Equal(t, args, c.Args, kind)

	var names []string
	env := map[string]string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		env[e.Name] = e.Value
	}
	requireKnownEnv(t, kind, names)

	// Both validate the whole config, so both get every secret.
	var secrets []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			require.Equal(t, "mailsvc", e.ValueFrom.SecretKeyRef.Name, kind)
			ref := e.ValueFrom.SecretKeyRef
			secrets = append(secrets, fmt.Sprintf("%s=%s optional=%t", e.Name, ref.Key, ref.Optional))
		}
	}
	var want []string
	for key, secretKey := range secretEnv {
		// One provider needs one of the first two; the webhook secret only with webhooks.addr.
		optional := key == "smtp.password" || key == "resend.api_key" || key == "webhooks.resend_secret" || key == "bounces.secret"
		want = append(want, fmt.Sprintf("%s=%s optional=%t", config.EnvName(key), secretKey, optional))
	}
	require.ElementsMatch(t, want, secrets, "%s: database URL, broker URL, SMTP password, Resend key and webhook secret come from the Secret", kind)

	for _, res := range []string{"cpu", "memory"} {
		require.NotEmpty(t, c.Resources.Requests[res], "%s requests %s", kind, res)
		require.NotEmpty(t, c.Resources.Limits[res], "%s limits %s", kind, res)
	}
	sc := pod.SecurityContext
	require.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s runAsNonRoot", kind)
	require.True(t, sc.RunAsUser != nil && *sc.RunAsUser != 0, "%s runAsUser is not root", kind)
	csc := c.SecurityContext
	require.True(t, csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem, "%s readOnlyRootFilesystem", kind)
	require.True(t, csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation, "%s allowPrivilegeEscalation false", kind)
	require.Equal(t, []string{"ALL"}, csc.Capabilities.Drop, kind)
	require.True(t, pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken, "%s mounts no API token", kind)
	require.Equal(t, r["ServiceAccount"].Metadata.Name, pod.ServiceAccountName, kind)

	// MAILSVC_CONFIG names mailsvc.yaml in the mount of the generated ConfigMap.
	dir, file := filepath.Split(env["MAILSVC_CONFIG"])
	require.Equal(t, "mailsvc.yaml", file, kind)
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == r["ConfigMap"].Metadata.Name {
				mounted = m.MountPath == filepath.Clean(dir) && m.ReadOnly
			}
		}
	}
	require.True(t, mounted, "%s mounts the ConfigMap read-only at %s", kind, dir)
}

// TestKubernetesServicesAndPDB checks the PodDisruptionBudget, the metrics Service (port
// http), the webhook Service (port webhooks, apart), and that the base renders no object of a
// CRD: `kubectl apply -k deploy/kubernetes` needs no Prometheus Operator.
func TestKubernetesServicesAndPDB(t *testing.T) {
	t.Parallel()
	r := renderKustomization(t)
	require.ElementsMatch(t, []string{"ServiceAccount", "Job", "Deployment", "PodDisruptionBudget", "Service",
		"Service/mailsvc-webhooks", "ConfigMap"}, slices.Collect(maps.Keys(r)), "built-in kinds only")
	var d struct {
		Replicas int         `yaml:"replicas"`
		Template podTemplate `yaml:"template"`
	}
	r.spec(t, "Deployment", &d)
	podLabels := d.Template.Metadata.Labels
	require.Equal(t, "mailsvc", podLabels["app.kubernetes.io/instance"], "the deployment's name on its pods, for the alert rules")

	var pdb struct {
		MinAvailable int `yaml:"minAvailable"`
		Selector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	r.spec(t, "PodDisruptionBudget", &pdb)
	require.Equal(t, 1, pdb.MinAvailable)
	require.Less(t, pdb.MinAvailable, d.Replicas, "a drain must be able to evict one replica")
	require.Subset(t, podLabels, pdb.Selector.MatchLabels)

	for key, port := range map[string]string{"Service": "http", "Service/mailsvc-webhooks": "webhooks"} {
		svc := serviceSpec(t, r, key)
		require.Subset(t, podLabels, svc.Selector, key)
		require.Len(t, svc.Ports, 1, key)
		require.Equal(t, port, svc.Ports[0].TargetPort, "%s targets the container's port %s", key, port)
		require.Equal(t, port, svc.Ports[0].Name, key)
	}
	require.Equal(t, 8081, serviceSpec(t, r, "Service/mailsvc-webhooks").Ports[0].Port)
}

type serviceSpecT struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
	} `yaml:"ports"`
}

func serviceSpec(t *testing.T, r rendered, key string) serviceSpecT {
	t.Helper()
	var svc serviceSpecT
	one := rendered{"Service": r[key]}
	one.spec(t, "Service", &svc)
	return svc
}

// TestKubernetesMonitoringComponent renders the base with the optional component monitoring/
// as an overlay would, and checks its ServiceMonitor: the metrics Service's port, /metrics,
// and the pods' app.kubernetes.io/instance copied onto the series (MailsvcRelayLeaderCount
// counts per deployment by it).
func TestKubernetesMonitoringComponent(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(filepath.Join(repoRoot, "deploy"))
	require.NoError(t, err)
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, abs) // kustomize takes no absolute path
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"resources: [%s]\ncomponents: [%s]\n", filepath.Join(rel, "kubernetes"), filepath.Join(rel, "kubernetes", "monitoring"))), 0o600))
	r := byKey(t, renderPath(t, overlay))
	require.Len(t, r, 8, "the base and one ServiceMonitor")
	svc := serviceSpec(t, r, "Service")

	var sm struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		PodTargetLabels []string `yaml:"podTargetLabels"`
		Endpoints       []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	}
	r.spec(t, "ServiceMonitor", &sm)
	require.Equal(t, "monitoring.coreos.com/v1", r["ServiceMonitor"].APIVersion)
	require.Subset(t, r["Service"].Metadata.Labels, sm.Selector.MatchLabels)
	require.Equal(t, []string{"app.kubernetes.io/instance"}, sm.PodTargetLabels)
	require.Contains(t, string(readFile(t, "deploy/prometheus/alerts.yaml")),
		"sum by (namespace, job, app_kubernetes_io_instance) (mailsvc_relay_leader)", "the label the alert counts by")
	require.Len(t, sm.Endpoints, 1)
	require.Equal(t, svc.Ports[0].Name, sm.Endpoints[0].Port)
	require.Equal(t, "/metrics", sm.Endpoints[0].Path)
}
