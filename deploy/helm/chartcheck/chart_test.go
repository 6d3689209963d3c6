package chartcheck

import (
	"fmt"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const defaultImage = "registry.example.com/shop/mailsvc:v0.1.0"

// secretRefs are the Secret's keys by environment variable; required ones are not optional.
var secretRefs = map[string]struct {
	key      string
	optional bool
}{
	"MAILSVC_DATABASE_URL":           {"database-url", false},
	"MAILSVC_AMQP_URL":               {"amqp-url", false},
	"MAILSVC_AMQP_MANAGEMENT_URL":    {"amqp-management-url", true},
	"MAILSVC_SMTP_PASSWORD":          {"smtp-password", true},
	"MAILSVC_RESEND_API_KEY":         {"resend-api-key", true},
	"MAILSVC_WEBHOOKS_RESEND_SECRET": {"resend-webhook-secret", true},
	"MAILSVC_BOUNCES_SECRET":         {"bounce-secret", true},
	"MAILSVC_BOUNCES_IMAP_URL":       {"bounces-imap-url", true},
	"MAILSVC_CONSOLE_SESSION_SECRET": {"console-session-secret", true},
}

// placeholders are the Secret's values a pod would see, for `mailsvc config check`.
var placeholders = map[string]string{
	"MAILSVC_DATABASE_URL":           "postgres://mailsvc:pw@db:5432/mailsvc",
	"MAILSVC_AMQP_URL":               "amqp://mailsvc:pw@mq:5672/",
	"MAILSVC_WEBHOOKS_RESEND_SECRET": "whsec_c2VjcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw==",
	"MAILSVC_CONSOLE_SESSION_SECRET": "0123456789abcdef0123456789abcdef-session",
	"MAILSVC_SMTP_PASSWORD":          "smtp-pw",
}

func get[T any](t *testing.T, objs objects, key string) *T {
	t.Helper()
	o, ok := objs[key]
	require.True(t, ok, "rendered %s (have %v)", key, objs.keys())
	v, ok := any(o).(*T)
	require.True(t, ok, "%s is a %T", key, o)
	return v
}

func TestChartMetadata(t *testing.T) {
	t.Parallel()
	m := chartMeta(t)
	require.Equal(t, "mailsvc", m.Name)
	require.Equal(t, "v2", m.APIVersion)
	require.Equal(t, "v0.1.0", m.AppVersion)
}

// TestChartDefault renders the default values: one Deployment with every role, the
// migration Job, the metrics Service, and no ServiceMonitor on a cluster without the
// Prometheus Operator although serviceMonitor.enabled is true.
func TestChartDefault(t *testing.T) {
	t.Parallel()
	objs := render(t, release{name: "mailsvc"})
	require.Equal(t, []string{"ConfigMap/mailsvc-config", "Deployment/mailsvc", "Job/mailsvc-migrate-1",
		"PodDisruptionBudget/mailsvc", "Service/mailsvc", "ServiceAccount/mailsvc"}, objs.keys())

	d := get[appsv1.Deployment](t, objs, "Deployment/mailsvc")
	require.Equal(t, int32(2), *d.Spec.Replicas)
	require.Equal(t, 0, d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue())
	c := requirePod(t, objs, d.Spec.Template.Spec, "mailsvc-config", []string{"serve"})
	require.Equal(t, map[string]int32{"http": 8080}, ports(c))
	requireProbes(t, c)
	require.Equal(t, "230MiB", envValue(c, "GOMEMLIMIT"))
	require.Equal(t, int64(45), *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	require.Equal(t, "mailsvc", d.Spec.Template.Labels["app.kubernetes.io/instance"])
	require.Contains(t, d.Spec.Template.Annotations, "checksum/config")

	cfg := configFile(t, objs, "mailsvc-config")
	require.Equal(t, ":8080", cfg["http"].(map[string]any)["addr"])
	require.Equal(t, "", cfg["webhooks"].(map[string]any)["addr"])
	require.Equal(t, "", cfg["console"].(map[string]any)["addr"])
	requireConfigCheck(t, objs, "mailsvc-config", c, "")

	// The chart's config keys are deploy/kubernetes/config/mailsvc.yaml's (which
	// deploy/deploy_test.go keeps in step with internal/config), but the ones it sets itself.
	kust := map[string]any{}
	require.NoError(t, yaml.Unmarshal(readRepo(t, "deploy/kubernetes/config/mailsvc.yaml"), &kust))
	want := slices.DeleteFunc(flatKeys("", kust), func(k string) bool { return k == "serve.roles" })
	require.Equal(t, want, flatKeys("", cfg), "values.yaml's config: has every key of the kustomize config")

	svc := get[corev1.Service](t, objs, "Service/mailsvc")
	require.Len(t, svc.Spec.Ports, 1)
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
	require.Equal(t, int32(8080), svc.Spec.Ports[0].Port)
	require.True(t, selects(svc.Spec.Selector, d.Spec.Template.Labels))

	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/mailsvc")
	require.Equal(t, 1, pdb.Spec.MinAvailable.IntValue())
	requireCovers(t, pdb, d)

	j := get[batchv1.Job](t, objs, "Job/mailsvc-migrate-1")
	require.Equal(t, corev1.RestartPolicyOnFailure, j.Spec.Template.Spec.RestartPolicy)
	jc := requirePod(t, objs, j.Spec.Template.Spec, "mailsvc-config", []string{"migrate"})
	require.Empty(t, jc.Ports)
	require.False(t, selects(d.Spec.Selector.MatchLabels, j.Spec.Template.Labels), "the Deployment does not adopt the Job's pod")

	sa := get[corev1.ServiceAccount](t, objs, "ServiceAccount/mailsvc")
	require.False(t, *sa.AutomountServiceAccountToken)
}

// TestChartServiceMonitor: rendered where the cluster serves the type, not when turned off.
func TestChartServiceMonitor(t *testing.T) {
	t.Parallel()
	objs := render(t, release{name: "shop", monitor: true, values: "serviceMonitor: {labels: {release: prometheus}}"})
	sm := get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor/shop-mailsvc")
	svc := get[corev1.Service](t, objs, "Service/shop-mailsvc")
	require.Equal(t, "prometheus", sm.Labels["release"])
	require.True(t, selects(sm.Spec.Selector.MatchLabels, svc.Labels), "the ServiceMonitor selects the metrics Service")
	require.Equal(t, []string{"app.kubernetes.io/instance"}, sm.Spec.PodTargetLabels,
		"app_kubernetes_io_instance on every series: MailsvcRelayLeaderCount counts by it")
	alerts := string(readRepo(t, "deploy/prometheus/alerts.yaml"))
	require.Contains(t, alerts, "sum by (namespace, job, app_kubernetes_io_instance) (mailsvc_relay_leader)")
	require.Len(t, sm.Spec.Endpoints, 1)
	require.Equal(t, "http", sm.Spec.Endpoints[0].Port)
	require.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
	require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	require.Equal(t, monitoringv1.Duration("30s"), sm.Spec.Endpoints[0].Interval)

	// Only the metrics Service matches its selector, not the webhook or console Services.
	objs = render(t, release{name: "shop", monitor: true, values: "webhooks: {enabled: true}\nconsole: {enabled: true}\n" + consoleLogin})
	sm = get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor/shop-mailsvc")
	var matched []string
	for key, o := range objs {
		if s, ok := o.(*corev1.Service); ok && selects(sm.Spec.Selector.MatchLabels, s.Labels) {
			matched = append(matched, key)
		}
	}
	require.Equal(t, []string{"Service/shop-mailsvc"}, matched)

	objs = render(t, release{name: "shop", monitor: true, values: "serviceMonitor: {enabled: false}"})
	require.NotContains(t, objs, "ServiceMonitor/shop-mailsvc")
	objs = render(t, release{name: "shop", monitor: false})
	require.NotContains(t, objs, "ServiceMonitor/shop-mailsvc", "no ServiceMonitor where the type is absent")
}

const consoleLogin = `config:
  console:
    tokens:
      - {name: helpdesk, role: viewer, token_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
`

// TestChartRolesSplit renders roles.split with the webhooks and the console on: two
// Deployments that run every role once, the webhook port on the intake only (the listener
// runs with the consumer role), the console on both, and a Service for each port.
func TestChartRolesSplit(t *testing.T) {
	t.Parallel()
	objs := render(t, release{name: "shop", revision: 4, values: `
roles: {split: true}
intake: {replicas: 3}
webhooks: {enabled: true}
console: {enabled: true}
image: {repository: ghcr.io/shop/mailsvc, tag: v1.2.3}
` + consoleLogin})
	require.Equal(t, []string{"ConfigMap/shop-mailsvc-config", "Deployment/shop-mailsvc", "Deployment/shop-mailsvc-intake",
		"Job/shop-mailsvc-migrate-4", "PodDisruptionBudget/shop-mailsvc", "PodDisruptionBudget/shop-mailsvc-intake",
		"Service/shop-mailsvc", "Service/shop-mailsvc-console", "Service/shop-mailsvc-webhooks",
		"ServiceAccount/shop-mailsvc"}, objs.keys())
	delivery := get[appsv1.Deployment](t, objs, "Deployment/shop-mailsvc")
	intake := get[appsv1.Deployment](t, objs, "Deployment/shop-mailsvc-intake")
	require.Equal(t, int32(2), *delivery.Spec.Replicas)
	require.Equal(t, int32(3), *intake.Spec.Replicas)

	dc := requirePod(t, objs, delivery.Spec.Template.Spec, "shop-mailsvc-config", []string{"serve", "--roles=sender,relay"})
	ic := requirePod(t, objs, intake.Spec.Template.Spec, "shop-mailsvc-config", []string{"serve", "--roles=consumer"})
	require.Equal(t, "ghcr.io/shop/mailsvc:v1.2.3", dc.Image)
	require.Equal(t, map[string]int32{"http": 8080, "console": 8082}, ports(dc))
	require.Equal(t, map[string]int32{"http": 8080, "webhooks": 8081, "console": 8082}, ports(ic))
	requireProbes(t, dc)
	requireProbes(t, ic)
	cfg := configFile(t, objs, "shop-mailsvc-config")
	require.Equal(t, ":8081", cfg["webhooks"].(map[string]any)["addr"])
	require.Equal(t, ":8082", cfg["console"].(map[string]any)["addr"])
	requireConfigCheck(t, objs, "shop-mailsvc-config", dc, "sender,relay")
	requireConfigCheck(t, objs, "shop-mailsvc-config", ic, "consumer")

	require.False(t, selects(delivery.Spec.Selector.MatchLabels, intake.Spec.Template.Labels), "the selectors do not overlap")
	require.False(t, selects(intake.Spec.Selector.MatchLabels, delivery.Spec.Template.Labels), "the selectors do not overlap")
	requireCovers(t, get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/shop-mailsvc"), delivery, intake)
	requireCovers(t, get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/shop-mailsvc-intake"), intake, delivery)

	for key, want := range map[string]struct {
		port    string
		number  int32
		selects []*appsv1.Deployment
	}{
		"Service/shop-mailsvc":          {"http", 8080, []*appsv1.Deployment{delivery, intake}},
		"Service/shop-mailsvc-webhooks": {"webhooks", 8081, []*appsv1.Deployment{intake}},
		"Service/shop-mailsvc-console":  {"console", 8082, []*appsv1.Deployment{delivery, intake}},
	} {
		svc := get[corev1.Service](t, objs, key)
		require.Len(t, svc.Spec.Ports, 1, key)
		require.Equal(t, want.port, svc.Spec.Ports[0].TargetPort.String(), key)
		require.Equal(t, want.number, svc.Spec.Ports[0].Port, key)
		for _, d := range []*appsv1.Deployment{delivery, intake} {
			require.Equal(t, slices.Contains(want.selects, d), selects(svc.Spec.Selector, d.Spec.Template.Labels), "%s selects %s", key, d.Name)
		}
	}
	for _, d := range []*appsv1.Deployment{delivery, intake} {
		require.Equal(t, "shop", d.Spec.Template.Labels["app.kubernetes.io/instance"], "one deployment for the alert rules")
	}
}

// TestChartPorts: other ports move the container ports, the config's addresses, the Services.
func TestChartPorts(t *testing.T) {
	t.Parallel()
	objs := render(t, release{name: "mailsvc", values: `
http: {port: 9090, service: {port: 80}}
webhooks: {enabled: true, port: 9443, service: {port: 443}}
`})
	d := get[appsv1.Deployment](t, objs, "Deployment/mailsvc")
	c := d.Spec.Template.Spec.Containers[0]
	require.Equal(t, map[string]int32{"http": 9090, "webhooks": 9443}, ports(&c))
	cfg := configFile(t, objs, "mailsvc-config")
	require.Equal(t, ":9090", cfg["http"].(map[string]any)["addr"])
	require.Equal(t, ":9443", cfg["webhooks"].(map[string]any)["addr"])
	require.Equal(t, int32(80), get[corev1.Service](t, objs, "Service/mailsvc").Spec.Ports[0].Port)
	require.Equal(t, int32(443), get[corev1.Service](t, objs, "Service/mailsvc-webhooks").Spec.Ports[0].Port)
	requireProbes(t, &c)
	requireConfigCheck(t, objs, "mailsvc-config", &c, "")
}

// TestChartRefusesSecretsInValues: a secret in values fails the render, naming the key.
func TestChartRefusesSecretsInValues(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"config: {database: {url: 'postgres://u:pw@db/mailsvc'}}",
		"config: {amqp: {url: 'amqp://u:pw@mq/'}}",
		"config: {smtp: {password: pw}}",
		"config: {resend: {api_key: re_123}}",
		"config: {webhooks: {resend_secret: whsec_abc}}",
		"config: {bounces: {secret: s3cret-s3cret-s3cret}}",
		"config: {console: {session_secret: 0123456789abcdef0123456789abcdef}}",
	} {
		_, err := renderFiles(release{name: "mailsvc", values: v})
		require.Error(t, err, v)
		var section map[string]map[string]map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(v), &section))
		for s, keys := range section["config"] {
			for k := range keys {
				require.ErrorContains(t, err, fmt.Sprintf("config.%s.%s is a secret", s, k))
			}
		}
	}
}
