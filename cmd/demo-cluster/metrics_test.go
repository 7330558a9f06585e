package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ringlimit/ringlimit/rules"
)

// A demo node's /metrics is valid Prometheus text holding the node's, the
// middleware's and the rules' series.
func TestNodeServesMetrics(t *testing.T) {
	n, err := newClusterNode(nodeConfig{Name: "n1", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0"},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	w, err := rules.NewWatcher("rules.yaml", rules.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI("n1", n, w))
	defer srv.Close()
	for range 25 { // items: 20 per second, so some are denied
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/api/items", nil)
		req.Header.Set("X-Api-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"ringlimit_decisions_total", "ringlimit_decision_duration_seconds",
		"ringlimit_http_requests_total", "ringlimit_rules_reloads_total", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	var decided, requests float64
	for _, m := range fams["ringlimit_decisions_total"].GetMetric() {
		decided += m.GetCounter().GetValue()
	}
	for _, m := range fams["ringlimit_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "rule" && l.GetValue() == "items" {
				requests += m.GetCounter().GetValue()
			}
		}
	}
	if decided != 25 || requests != 25 {
		t.Errorf("%v decisions and %v requests of rule items counted, want 25 and 25", decided, requests)
	}
}
