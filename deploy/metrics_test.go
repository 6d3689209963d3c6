package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

var metricNameRE = regexp.MustCompile(`\bmailsvc_[a-zA-Z0-9_]+`)

// alertRule is one rule of alerts.yaml.
type alertRule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules returns alerts.yaml's rules, every group's in order.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(readFile(t, "deploy/prometheus/alerts.yaml"), &f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// dashboardQueries returns every PromQL expression of the Grafana dashboard's panels and the
// queries of its template variables.
func dashboardQueries(t *testing.T) (exprs, variables []string) {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(readFile(t, "deploy/grafana/mailsvc.json"), &d))
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has an empty query", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			var q struct {
				Query string `json:"query"`
			}
			require.NoError(t, json.Unmarshal(v.Query, &q))
			variables = append(variables, q.Query)
		}
	}
	return exprs, variables
}

// referencedMetrics returns the mailsvc_* names the alert rules (expressions and runbook
// text) and the dashboard name, each with where it was seen first.
func referencedMetrics(t *testing.T) map[string]string {
	t.Helper()
	refs := map[string]string{}
	add := func(where, text string) {
		for _, n := range metricNameRE.FindAllString(text, -1) {
			if _, ok := refs[n]; !ok {
				refs[n] = where
			}
		}
	}
	for _, r := range alertRules(t) {
		add("alerts.yaml "+r.Alert+r.Record, r.Expr)
		for _, a := range r.Annotations {
			add("alerts.yaml "+r.Alert+" annotations", a)
		}
	}
	exprs, vars := dashboardQueries(t)
	for _, e := range append(exprs, vars...) {
		add("grafana/mailsvc.json", e)
	}
	return refs
}

// TestAlertRulesShape checks what promtool does not: every alert has a severity and the
// summary, description and runbook annotations an on-call person reads.
func TestAlertRulesShape(t *testing.T) {
	t.Parallel()
	rules := alertRules(t)
	want := []string{
		"MailsvcConsumerDisconnected", "MailsvcDeadLetterQueueReceiving", "MailsvcOldestPendingMailTooOld",
		"MailsvcOutboxLagging", "MailsvcOutboxDeadRows", "MailsvcUnknownMails", "MailsvcHighRetryRatio",
		"MailsvcFencingRejections", "MailsvcRelayLeaderCount", "MailsvcDeadLetterQueueNotEmpty", "MailsvcDeadLettersHeld",
		"MailsvcQueueNearlyFull", "MailsvcInputBacklogGrowing", "MailsvcEventLagHigh", "MailsvcOutboxStuck",
		"MailsvcFeedbackUnroutable", "MailsvcAllReplicasDown", "MailsvcStatsStale", "MailsvcBrokerBlocked",
		"MailsvcProviderBreakerOpen", "MailsvcProviderQuotaExhausted", "MailsvcProviderThrottled", "MailsvcProviderSlow",
		"MailsvcMailsHeld", "MailsvcHighBounceRate", "MailsvcHighComplaintRate", "MailsvcBounceReportsNotRecorded",
		"MailsvcDeliveryUnconfirmed", "MailsvcDeliveryObjectiveFastBurn", "MailsvcDeliveryObjectiveSlowBurn",
		"MailsvcTableBloated", "MailsvcReplicationLagHigh", "MailsvcAttachmentFetchesFailing",
	}
	var got []string
	for _, r := range rules {
		if r.Record != "" {
			require.True(t, strings.HasPrefix(r.Record, "mailsvc:") && metricNameRE.MatchString(r.Expr),
				"recording rule %s: named mailsvc:..., computed from mailsvc's metrics", r.Record)
			continue
		}
		got = append(got, r.Alert)
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		for _, a := range []string{"summary", "description", "runbook"} {
			require.NotEmpty(t, r.Annotations[a], "%s has a %s annotation", r.Alert, a)
		}
		require.True(t, metricNameRE.MatchString(r.Expr) || strings.Contains(r.Expr, "mailsvc:") ||
			strings.Contains(r.Expr, `up{job="mailsvc"}`),
			"%s uses mailsvc's metrics, their recording rules (or its scrape job's up)", r.Alert)
	}
	require.ElementsMatch(t, want, got)
}

// TestDashboardQueriesParse has promtool parse every dashboard query (with Grafana's
// variables replaced), as `promtool check rules` does for the alerts.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is needed: run scripts/promtool.sh (make test does) to install it")
	exprs, _ := dashboardQueries(t)
	require.GreaterOrEqual(t, len(exprs), 15)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*", "$job", ".*")
	var rules []map[string]string
	for i, e := range exprs {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": vars.Replace(e)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	_, err = run(".", promtool, os.Environ(), "check", "rules", file)
	require.NoError(t, err)
}

// TestMetricNamesExported starts the real binary (`mailsvc serve`, built with the Dockerfile's
// flags) against its own migrated schema and broker names, scrapes /metrics once it is ready,
// and requires every metric the alerts and the dashboard name to be exported. Histogram
// series (_bucket, _sum, _count) count as their histogram. The queue gauges exist only on the
// relay leader, from its first read of the broker on: the scrape is repeated for up to 20 s
// until nothing is missing.
func TestMetricNamesExported(t *testing.T) {
	t.Parallel()
	refs := referencedMetrics(t)
	require.NotEmpty(t, refs)
	addr := startServe(t)

	var missing []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing = missingMetrics(scrapeFamilies(t, "http://"+addr+"/metrics"), refs)
		missing = slices.DeleteFunc(missing, func(m string) bool { return absentHere[strings.Fields(m)[0]] })
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling a condition with a deadline
	}
	require.Empty(t, missing, "metrics named by the alerts or the dashboard that `mailsvc serve` does not export")
}

// absentHere are the metrics that have no series until what they measure
// exists, which it does not on the test's server: a streaming standby.
var absentHere = map[string]bool{"mailsvc_db_replication_lag_seconds": true}

// missingMetrics lists the names of refs the exposition families lacks, with where they
// were named, one per family.
func missingMetrics(families, refs map[string]string) []string {
	var missing []string
	for name, where := range refs {
		if !exported(families, name) {
			missing = append(missing, histogramBase(name)+" (named in "+where+")")
		}
	}
	slices.Sort(missing)
	return slices.CompactFunc(missing, func(a, b string) bool {
		return strings.Fields(a)[0] == strings.Fields(b)[0]
	})
}

func exported(families map[string]string, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if ok && (families[base] == "histogram" || (suffix != "_bucket" && families[base] == "summary")) {
			return true
		}
	}
	return false
}

// histogramBase names a histogram series by its family: x_bucket, x_sum, x_count -> x.
func histogramBase(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

// scrapeFamilies returns the metric families of a Prometheus text exposition, name -> type.
func scrapeFamilies(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := httpClient().Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	families := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, families)
	return families
}

// httpClient keeps no idle connections, so no transport goroutine outlives a test (goleak).
func httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// startServe runs `mailsvc serve` on a loopback port with a fresh schema and broker names,
// configured only through MAILSVC_* variables as in a container, and waits until /readyz
// answers 200. It returns the HTTP address. A cleanup stops the process with SIGTERM and
// requires a clean exit within the Kubernetes grace period.
func startServe(t *testing.T) string {
	t.Helper()
	bin := mailsvcBinary(t)
	schema := storetest.New(t)
	names := brokertest.New(t)
	addr := freeAddr(t)
	env := append(envWithout("MAILSVC_"),
		"MAILSVC_DATABASE_URL="+schema.URL,
		"MAILSVC_AMQP_URL="+brokertest.URL(),
		"MAILSVC_AMQP_INPUT_EXCHANGE="+names.InputExchange,
		"MAILSVC_AMQP_QUEUE="+names.Queue,
		"MAILSVC_AMQP_DEAD_LETTER_EXCHANGE="+names.DeadLetterExchange,
		"MAILSVC_AMQP_DEAD_LETTER_QUEUE="+names.DeadLetterQueue,
		"MAILSVC_AMQP_EVENTS_EXCHANGE="+names.EventsExchange,
		"MAILSVC_HTTP_ADDR="+addr,
		"MAILSVC_MAIL_FROM=Shop <orders@shop.example>",
		"MAILSVC_SMTP_HOST=127.0.0.1",
		"MAILSVC_SMTP_PORT="+portOf(t, freeAddr(t)), // nothing listens: no mail is sent here
		"MAILSVC_SMTP_TLS=none",
		"MAILSVC_LOG_LEVEL=warn",
	)
	out := &syncBuffer{}
	cmd := exec.Command(bin, "serve")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { stopServe(t, cmd, exited, out) })

	waitReady(t, "http://"+addr+"/readyz", exited, out)
	return addr
}

func waitReady(t *testing.T, url string, exited <-chan error, out *syncBuffer) {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		select {
		case err := <-exited:
			t.Fatalf("mailsvc serve exited before it was ready: %v\n%s", err, out.String())
		case <-deadline.C:
			t.Fatalf("mailsvc serve not ready within 60s (last /readyz: %s)\n%s", last, out.String())
		case <-tick.C:
			resp, err := httpClient().Get(url)
			if err != nil {
				last = err.Error()
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status + " " + string(body)
		}
	}
}

// stopServe sends SIGTERM, as Kubernetes and Docker do, and requires exit status 0 within
// the Deployment's 45 s grace period; past that it kills the process.
func stopServe(t *testing.T, cmd *exec.Cmd, exited <-chan error, out *syncBuffer) {
	select {
	case err := <-exited:
		t.Errorf("mailsvc serve exited on its own: %v\n%s", err, out.String())
		return
	default:
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	grace := time.NewTimer(45 * time.Second)
	defer grace.Stop()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("mailsvc serve exited with %v after SIGTERM\n%s", err, out.String())
		}
	case <-grace.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("mailsvc serve did not stop within 45s of SIGTERM\n%s", out.String())
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
