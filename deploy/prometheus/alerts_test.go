package prometheus

import (
	"os"
	"os/exec"
	"path/filepath"
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
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs = append(exprs, r.Expr)
			for _, name := range ringNameRe.FindAllString(r.Expr, -1) {
				if series[name] == nil {
					t.Errorf("%s: %s is not a series the metrics package exports", r.Alert, name)
				}
			}
			for _, sel := range selectorRe.FindAllStringSubmatch(r.Expr, -1) {
				name := sel[1]
				if name == "up" {
					continue
				}
				if !strings.HasPrefix(name, "ringlimit_") {
					t.Errorf("%s: selector of %s: only ringlimit_ series and up exist", r.Alert, name)
					continue
				}
				for _, m := range strings.Split(sel[2], ",") {
					mm := matcherRe.FindStringSubmatch(m)
					if mm == nil {
						t.Errorf("%s: matcher %q not understood", r.Alert, m)
						continue
					}
					label, op, value := mm[1], mm[2], mm[3]
					if targetLabels[label] {
						continue
					}
					if series[name] != nil && series[name][label] == nil {
						t.Errorf("%s: %s has no label %s", r.Alert, name, label)
					} else if op == "=" && series[name] != nil && !series[name][label][value] {
						t.Errorf("%s: %s{%s=%q}: the label never takes that value", r.Alert, name, label, value)
					}
				}
			}
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
