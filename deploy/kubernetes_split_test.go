package deploy_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/config"
)

// splitDeployment is what the split test reads of a Deployment.
type splitDeployment struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template podTemplate `yaml:"template"`
}

// selects reports whether selector picks a pod with labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesSplitByRole renders deploy/kubernetes-split: the base's objects, with the
// Deployment mailsvc (same name and selector, so switching is an in-place update) running
// sender and relay, and a Deployment mailsvc-intake running the consumer. Together they run
// every role once; each pod is as safe as the base's, has its own PodDisruptionBudget, and
// the metrics Service sees both.
func TestKubernetesSplitByRole(t *testing.T) {
	t.Parallel()
	base := renderKustomization(t)
	objs := renderObjects(t, "kubernetes-split")
	byKind := map[string][]k8sObject{}
	unique := rendered{}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
		unique[renderedKey(o)] = o
	}
	counts := map[string]int{}
	for k, os := range byKind {
		counts[k] = len(os)
	}
	require.Equal(t, map[string]int{"ServiceAccount": 1, "Job": 1, "Deployment": 2, "PodDisruptionBudget": 2,
		"Service": 2, "ConfigMap": 1}, counts)
	file, _ := k8sConfig(t, unique)
	env := map[string]string{"MAILSVC_DATABASE_URL": "postgres://db/mailsvc", "MAILSVC_AMQP_URL": "amqp://mq/"}
	cfg := loadConfig(t, file, env)

	var baseDeployment splitDeployment
	base.spec(t, "Deployment", &baseDeployment)
	deployments := map[string]splitDeployment{}
	var ran []string
	for _, o := range byKind["Deployment"] {
		var d splitDeployment
		one := rendered{"Deployment": o}
		one.spec(t, "Deployment", &d)
		deployments[o.Metadata.Name] = d
		pod := d.Template.Spec
		c := pod.Containers[0]
		require.Len(t, c.Args, 2, o.Metadata.Name)
		roles, ok := strings.CutPrefix(c.Args[1], "--roles=")
		require.True(t, ok, "%s: serve --roles=...", o.Metadata.Name)
		requirePod(t, "Deployment "+o.Metadata.Name, pod, []string{"serve", c.Args[1]}, unique)
		withRoles := maps.Clone(env)
		withRoles["MAILSVC_SERVE_ROLES"] = roles // the flag is validated as the key is
		loadConfig(t, file, withRoles)
		ran = append(ran, strings.Split(roles, ",")...)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, o.Metadata.Name)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, o.Metadata.Name)
		require.Greater(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, app.ShutdownBound(cfg), o.Metadata.Name)
		require.GreaterOrEqual(t, d.Replicas, 2, "%s survives the loss of a pod", o.Metadata.Name)
		require.Equal(t, "mailsvc", d.Template.Metadata.Labels["app.kubernetes.io/instance"],
			"%s: one deployment (one relay lease) for the alert rules", o.Metadata.Name)
	}
	slices.Sort(ran)
	want := slices.Clone(config.Roles)
	slices.Sort(want)
	require.Equal(t, want, ran, "every role runs, each in one Deployment")

	delivery, intake := deployments["mailsvc"], deployments["mailsvc-intake"]
	require.Equal(t, []string{"serve", "--roles=sender,relay"}, delivery.Template.Spec.Containers[0].Args)
	require.Equal(t, []string{"serve", "--roles=consumer"}, intake.Template.Spec.Containers[0].Args)
	require.Equal(t, baseDeployment.Selector.MatchLabels, delivery.Selector.MatchLabels, "mailsvc keeps its (immutable) selector")
	require.False(t, selects(delivery.Selector.MatchLabels, intake.Template.Metadata.Labels), "the selectors do not overlap")
	require.False(t, selects(intake.Selector.MatchLabels, delivery.Template.Metadata.Labels), "the selectors do not overlap")

	for _, o := range byKind["PodDisruptionBudget"] {
		var pdb struct {
			MinAvailable int `yaml:"minAvailable"`
			Selector     struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		}
		one := rendered{"PodDisruptionBudget": o}
		one.spec(t, "PodDisruptionBudget", &pdb)
		var covers []string
		for name, d := range deployments {
			if selects(pdb.Selector.MatchLabels, d.Template.Metadata.Labels) {
				covers = append(covers, name)
			}
		}
		require.Len(t, covers, 1, "PodDisruptionBudget %s covers one Deployment", o.Metadata.Name)
		require.Less(t, pdb.MinAvailable, deployments[covers[0]].Replicas, "a drain can evict one pod of %s", covers[0])
	}

	var svc struct {
		Selector map[string]string `yaml:"selector"`
	}
	unique.spec(t, "Service", &svc)
	for name, d := range deployments {
		require.True(t, selects(svc.Selector, d.Template.Metadata.Labels), "the metrics Service selects the pods of %s", name)
	}
	// The webhook listener runs with the consumer role (internal/app): its Service selects
	// the intake's pods only.
	hooks := serviceSpec(t, unique, "Service/mailsvc-webhooks")
	require.True(t, selects(hooks.Selector, intake.Template.Metadata.Labels), "the webhook Service selects mailsvc-intake")
	require.False(t, selects(hooks.Selector, delivery.Template.Metadata.Labels), "the webhook Service skips the pods without the consumer role")
}
