package prometheus

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exported gathers every ringlimit_ series a node (in a cluster of two, so
// the peer series exist), a Middleware with a rule and a rule Watcher
// export: family name → label name → the values seen.
func exported(t *testing.T) map[string]map[string]map[string]bool {
	t.Helper()
	c := nodetest.Start(t, 2, nil)
	reg := prometheus.NewRegistry()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: api, key: ip, algorithm: fixed_window, limit: 5, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(path, rules.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mw := httplimit.NewMiddleware(c.Nodes[0], httplimit.WithRule("api", rule))
	for _, err := range []error{metrics.Register(reg, c.Nodes[0]), metrics.RegisterMiddleware(reg, mw), metrics.RegisterWatcher(reg, w)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]bool{}
	add := func(name string, labels map[string]string) {
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		for k, v := range labels {
			if out[name][k] == nil {
				out[name][k] = map[string]bool{}
			}
			out[name][k][v] = true
		}
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{f.GetName()}
			if m.GetHistogram() != nil {
				names = []string{f.GetName() + "_bucket", f.GetName() + "_sum", f.GetName() + "_count"}
			}
			for _, n := range names {
				add(n, labels)
			}
		}
	}
	return out
}

var (
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	ringNameRe = regexp.MustCompile(`\bringlimit_[a-z0-9_]+`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
)

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true}

// Every rule is well formed, the alerts the operator needs are there, and
// every expression names only series the metrics package exports, with
// labels and values they take, or up.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	series := exported(t)
	sections := runbookSections(t)
	seen := map[string]bool{}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without an alert name, a second %q, or no expr", g.Name, r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: a summary and a description wanted", r.Alert)
			}
			if want := runbookBase + anchor(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			} else if !sections[anchor(r.Alert)] {
				t.Errorf("%s: docs/runbooks.md has no section %q", r.Alert, r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs = append(exprs, r.Expr)
			checkExpr(t, series, nil, r.Alert, r.Expr)
		}
	}
	// What an operator needs, by the series each alert must watch.
	all := strings.Join(exprs, "\n")
	for what, needle := range map[string]string{
		"a target down":         `up{`,
		"a missing member":      "ringlimit_members",
		"a store breaker open":  "ringlimit_store_breaker_state",
		"the fallback share":    `source="fallback"`,
		"write-behind failures": "ringlimit_writebehind_failures_total",
		"live-key evictions":    `live="true"`,
	} {
		if !strings.Contains(all, needle) {
			t.Errorf("no alert on %s (%s)", what, needle)
		}
	}
}

// promtool accepts the rules, and its unit tests (alerts_test.yaml) see
// each alert fire on its failure and stay quiet on a healthy twin.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: no promtool on PATH (Debian: apt-get install prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// runbookBase is where each alert's runbook_url points, before its section.
const runbookBase = "https://github.com/ringlimit/ringlimit/blob/main/docs/runbooks.md#"

// anchor is the fragment GitHub gives a heading: lower case, spaces as
// dashes, punctuation other than dashes and underscores dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookSections are the anchors of docs/runbooks.md's headings.
func runbookSections(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			out[anchor(h)] = true
		}
	}
	return out
}

// readRules parses alerts.yaml.
func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

var jobRe = regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)

// ruleJob is the one job every rule selects.
func ruleJob(t *testing.T, f ruleFile) string {
	t.Helper()
	jobs := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			ms := jobRe.FindAllStringSubmatch(r.Expr, -1)
			if len(ms) == 0 {
				t.Errorf("%s selects no job: it would read other jobs' up", r.Alert)
			}
			for _, m := range ms {
				jobs[m[1]] = true
			}
		}
	}
	if len(jobs) != 1 {
		t.Fatalf("the rules select the jobs %v, want one", jobs)
	}
	for j := range jobs {
		return j
	}
	return ""
}

// The unit tests cover every alert both ways: the first test group, a
// healthy cluster under load, expects no alert of any name, and each alert
// fires in some group.
func TestAlertUnitTestsCover(t *testing.T) {
	data, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ut struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &ut); err != nil {
		t.Fatal(err)
	}
	if len(ut.Tests) == 0 || len(ut.RuleFiles) != 1 || ut.RuleFiles[0] != "alerts.yaml" {
		t.Fatalf("alerts_test.yaml: rule_files %v, %d tests", ut.RuleFiles, len(ut.Tests))
	}
	quiet, fires := map[string]bool{}, map[string]bool{}
	for i, g := range ut.Tests {
		for _, a := range g.AlertRuleTest {
			if i == 0 && len(a.ExpAlerts) == 0 {
				quiet[a.Alertname] = true
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if !quiet[r.Alert] {
				t.Errorf("%s: the healthy cluster (the first test) does not check that it stays quiet", r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no test sees it fire", r.Alert)
			}
		}
	}
}

// The Prometheus Operator's manifests carry the same rules, and scrape the
// example's pods under the job the rules select.
func TestOperatorManifests(t *testing.T) {
	rules := readRules(t)
	job := ruleJob(t, rules)
	docs := map[string]map[string]any{}
	for _, file := range []string{filepath.Join("monitoring", "operator.yaml"), "deployment.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "kubernetes", file))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			docs[fmt.Sprint(m["kind"])] = m
		}
	}
	// The PrometheusRule's groups are alerts.yaml's.
	var want struct {
		Groups any `yaml:"groups"`
	}
	data, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	pr := docs["PrometheusRule"]
	if pr == nil || pr["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("no PrometheusRule (monitoring.coreos.com/v1) in deploy/kubernetes/monitoring/operator.yaml")
	}
	if got := pr["spec"].(map[string]any)["groups"]; !reflect.DeepEqual(got, want.Groups) {
		t.Errorf("the PrometheusRule's groups differ from alerts.yaml's: copy them over")
	}

	// The PodMonitor selects the Deployment's pods, scrapes its http port
	// at /metrics, and names the job after a pod label whose value is job.
	pm := docs["PodMonitor"]
	if pm == nil || pm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("no PodMonitor (monitoring.coreos.com/v1) in deploy/kubernetes/monitoring/operator.yaml")
	}
	spec := pm["spec"].(map[string]any)
	tmpl := docs["Deployment"]["spec"].(map[string]any)["template"].(map[string]any)
	labels := tmpl["metadata"].(map[string]any)["labels"].(map[string]any)
	sel, _ := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	if len(sel) == 0 {
		t.Fatal("the PodMonitor selects no labels")
	}
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("the PodMonitor selects %s=%v; the pods have %v", k, v, labels[k])
		}
	}
	jobLabel, _ := spec["jobLabel"].(string)
	if jobLabel == "" || labels[jobLabel] != job {
		t.Errorf("the PodMonitor's jobLabel %q: the pods' label has %v, the rules select job %q", jobLabel, labels[jobLabel], job)
	}
	eps, _ := spec["podMetricsEndpoints"].([]any)
	if len(eps) != 1 {
		t.Fatalf("podMetricsEndpoints %v: want one", eps)
	}
	ep := eps[0].(map[string]any)
	ports := map[string]bool{}
	for _, c := range tmpl["spec"].(map[string]any)["containers"].([]any) {
		for _, p := range c.(map[string]any)["ports"].([]any) {
			ports[fmt.Sprint(p.(map[string]any)["name"])] = true
		}
	}
	if ep["path"] != "/metrics" || !ports[fmt.Sprint(ep["port"])] {
		t.Errorf("the PodMonitor scrapes port %v path %v: want a container port's name and /metrics", ep["port"], ep["path"])
	}
}

// prometheus.yml, the plain scrape config, scrapes under the rules' job,
// keeps the pods by the label the Deployment sets, loads alerts.yaml, and
// promtool accepts it.
func TestScrapeConfig(t *testing.T) {
	job := ruleJob(t, readRules(t))
	data, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != job {
		t.Fatalf("prometheus.yml: want one scrape config with job_name %q: %+v", job, cfg.ScrapeConfigs)
	}
	if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != "alerts.yaml" {
		t.Errorf("prometheus.yml: rule_files %v, want alerts.yaml", cfg.RuleFiles)
	}
	var dep struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	depData, err := os.ReadFile(filepath.Join("..", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.NewDecoder(strings.NewReader(string(depData))).Decode(&dep); err != nil {
		t.Fatal(err)
	}
	// Kubernetes discovery names a pod label by its name with every
	// character outside [a-zA-Z0-9_] made an underscore.
	podLabels := map[string]string{}
	for k, v := range dep.Spec.Template.Metadata.Labels {
		podLabels["__meta_kubernetes_pod_label_"+regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")] = v
	}
	kept := false
	for _, r := range cfg.ScrapeConfigs[0].RelabelConfigs {
		if r.Action == "keep" && len(r.SourceLabels) == 1 && strings.HasPrefix(r.SourceLabels[0], "__meta_kubernetes_pod_label_") {
			v, ok := podLabels[r.SourceLabels[0]]
			kept = ok && regexp.MustCompile(`^(?:`+r.Regex+`)$`).MatchString(v)
		}
	}
	if !kept {
		t.Error("prometheus.yml keeps no pod label the Deployment's pods carry")
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: no promtool on PATH (Debian: apt-get install prometheus)")
	}
	out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput()
	if err != nil && strings.Contains(string(out), "field kubernetes_sd_configs not found") {
		// Debian's Prometheus is built without Kubernetes discovery: check
		// the rest of the file with a static target in its place.
		t.Logf("this promtool has no kubernetes_sd_configs; checking with static_configs instead")
		dir := t.TempDir()
		alt := strings.Replace(string(data), "kubernetes_sd_configs:\n      - role: pod", "static_configs:\n      - targets: [\"127.0.0.1:8080\"]", 1)
		rules, _ := os.ReadFile("alerts.yaml")
		if alt == string(data) || os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(alt), 0o600) != nil ||
			os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o600) != nil {
			t.Fatal("could not make the static twin of prometheus.yml")
		}
		out, err = exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
	}
	if err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// checkExpr reports, as what's, each series expr names that the metrics
// package does not export (but up, and those elsewhere says another test
// checks), and each label matcher on one of them with a label it lacks or a
// value the label never takes.
func checkExpr(t *testing.T, series map[string]map[string]map[string]bool, elsewhere func(string) bool, what, expr string) {
	t.Helper()
	for _, name := range ringNameRe.FindAllString(expr, -1) {
		if elsewhere != nil && elsewhere(name) {
			continue
		}
		if series[name] == nil {
			t.Errorf("%s: %s is not a series the metrics package exports", what, name)
		}
	}
	for _, sel := range selectorRe.FindAllStringSubmatch(expr, -1) {
		name := sel[1]
		if name == "up" || elsewhere != nil && elsewhere(name) {
			continue
		}
		if !strings.HasPrefix(name, "ringlimit_") {
			t.Errorf("%s: selector of %s: only ringlimit_ series and up exist", what, name)
			continue
		}
		for _, m := range strings.Split(sel[2], ",") {
			mm := matcherRe.FindStringSubmatch(m)
			if mm == nil {
				t.Errorf("%s: matcher %q not understood", what, m)
				continue
			}
			label, op, value := mm[1], mm[2], mm[3]
			if targetLabels[label] {
				continue
			}
			if series[name] != nil && series[name][label] == nil {
				t.Errorf("%s: %s has no label %s", what, name, label)
			} else if op == "=" && series[name] != nil && !series[name][label][value] {
				t.Errorf("%s: %s{%s=%q}: the label never takes that value", what, name, label, value)
			}
		}
	}
}
