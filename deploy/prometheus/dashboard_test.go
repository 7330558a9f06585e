package prometheus

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// grafanaVars are the dashboard's variables as a query sees them once
// Grafana has filled them in: every member, a rate window.
var grafanaVars = strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `5m`)

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a row's
}

// grpcSeries says which series grpclimit exports: a module of its own,
// which this one cannot import; grpclimit's TestDashboardSeries checks them.
func grpcSeries(name string) bool { return strings.HasPrefix(name, "ringlimit_grpc_") }

var (
	byRe          = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValuesRe = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
)

// Every query of the Grafana dashboard is PromQL that promtool accepts
// (each becomes a recording rule of a file promtool checks), names only
// series the metrics package exports with labels and values they take,
// aggregates by labels those series (or the target) carry, and reads the
// data source the dashboard asks for.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "grafana", "ringlimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard %q (uid %q) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	series := exported(t)
	type query struct{ where, expr string }
	var queries []query
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if ids[p.ID] || p.Title == "" {
				t.Errorf("panel %d %q: a second panel with this id, or no title", p.ID, p.Title)
			}
			ids[p.ID] = true
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q reads data source %q, not the dashboard's ${datasource}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for i, q := range p.Targets {
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("panel %q query %d is empty", p.Title, i)
				}
				queries = append(queries, query{fmt.Sprintf("panel %q query %d", p.Title, i), grafanaVars.Replace(q.Expr)})
			}
		}
	}
	walk(d.Panels)

	// Variables: every one a query uses is defined; a query variable's
	// label_values(selector, label) reads an exported series and label.
	defined := map[string]bool{"__rate_interval": true}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
		if v.Type != "query" {
			continue
		}
		m := labelValuesRe.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		checkExpr(t, series, nil, "variable "+v.Name, m[1])
		queries = append(queries, query{"variable " + v.Name, m[1]})
	}
	for _, v := range regexp.MustCompile(`\$\{?([a-zA-Z_]+)`).FindAllStringSubmatch(string(data), -1) {
		if !defined[v[1]] {
			t.Errorf("the dashboard uses $%s, which it does not define", v[1])
		}
	}

	var rules []map[string]string
	for i, q := range queries {
		if strings.Contains(q.expr, "$") {
			t.Errorf("%s: a variable left after substitution: %s", q.where, q.expr)
		}
		checkExpr(t, series, grpcSeries, q.where, q.expr)
		// Aggregation labels: the target's, a histogram's le, or a label of
		// a series the query reads.
		has := map[string]bool{"job": true, "instance": true, "namespace": true, "le": true}
		for _, name := range ringNameRe.FindAllString(q.expr, -1) {
			if grpcSeries(name) {
				has["rule"], has["result"] = true, true // grpclimit's test checks them
			}
			for l := range series[name] {
				has[l] = true
			}
		}
		for _, by := range byRe.FindAllStringSubmatch(q.expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !has[l] {
					t.Errorf("%s: aggregates by %s, a label none of its series carries", q.where, l)
				}
			}
		}
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": q.expr})
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped promtool's check of the queries: no promtool on PATH (Debian: apt-get install prometheus)")
	}
	file := filepath.Join(t.TempDir(), "dashboard_rules.yaml")
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, res)
	} else if want := fmt.Sprintf("%d rules found", len(rules)); !strings.Contains(string(res), want) {
		t.Errorf("promtool check rules: %s; want %s", res, want)
	}
}
