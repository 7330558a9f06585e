package grpclimit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
)

// The Grafana dashboard's gRPC queries (deploy/grafana/ringlimit.json)
// read series Register exports, with labels they carry. The rest of each
// query, and its syntax, deploy/prometheus's TestDashboard checks: that
// module cannot import this one.
func TestDashboardSeries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "ringlimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := grpclimit.Register(reg, grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("r", perMinute(5)))); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{} // family → its labels and the target's
	for _, f := range fams {
		labels[f.GetName()] = map[string]bool{"job": true, "instance": true, "namespace": true}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[f.GetName()][l.GetName()] = true
		}
	}
	// A query is a JSON string: "expr": "…". Its grpc series, their
	// matchers' labels, and the labels it aggregates by.
	exprRe := regexp.MustCompile(`"expr": "((?:[^"\\]|\\.)*)"`)
	nameRe := regexp.MustCompile(`\bringlimit_grpc_[a-z0-9_]+`)
	selRe := regexp.MustCompile(`(ringlimit_grpc_[a-z0-9_]+)\s*\{([^}]*)\}`)
	byRe := regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	n := 0
	for _, m := range exprRe.FindAllStringSubmatch(string(data), -1) {
		expr := strings.ReplaceAll(m[1], `\"`, `"`)
		names := nameRe.FindAllString(expr, -1)
		if len(names) == 0 {
			continue
		}
		n++
		for _, name := range names {
			if labels[name] == nil {
				t.Errorf("%s: %s is not a series grpclimit.Register exports", expr, name)
			}
		}
		for _, sel := range selRe.FindAllStringSubmatch(expr, -1) {
			for _, matcher := range strings.Split(sel[2], ",") {
				if l := strings.TrimSpace(strings.SplitN(matcher, "=", 2)[0]); l != "" && !labels[sel[1]][strings.TrimRight(l, "!~")] {
					t.Errorf("%s: %s has no label %s", expr, sel[1], l)
				}
			}
		}
		for _, by := range byRe.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				if l = strings.TrimSpace(l); !labels[names[0]][l] {
					t.Errorf("%s: aggregates by %s, which %s does not carry", expr, l, names[0])
				}
			}
		}
	}
	if n == 0 {
		t.Error("the dashboard has no gRPC query")
	}
}
