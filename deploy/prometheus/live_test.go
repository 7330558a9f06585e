package prometheus

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A real Prometheus (Debian's prometheus package) scrapes three live nodes
// under the job prometheus.yml names and evaluates alerts.yaml on their
// real series: every rule evaluates without error, and when one node stops
// answering and leaves, RinglimitTargetDown and RinglimitMemberMissing go
// pending (their for: keeps them from firing within a test).
func TestLivePrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("skipped: no prometheus on PATH (Debian: apt-get install prometheus)")
	}
	c := nodetest.Start(t, 3, nil)
	var targets []string
	var servers []*httptest.Server
	for _, n := range c.Nodes {
		h, err := metrics.Handler(n, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		servers = append(servers, s)
		targets = append(targets, strings.TrimPrefix(s.URL, "http://"))
	}
	dir := t.TempDir()
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	job := ruleJob(t, readRules(t))
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [alerts.yaml]
scrape_configs:
  - job_name: %s
    static_configs: [{targets: ["%s"]}]
`, job, strings.Join(targets, `", "`))
	if os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o600) != nil || os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600) != nil {
		t.Fatal("cannot write the config")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := &strings.Builder{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	client := &http.Client{Timeout: 5 * time.Second}
	api := func(path string, v any) error {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(v)
	}
	// poll calls ok every 100 ms until it is true, for at most d.
	poll := func(what string, d time.Duration, ok func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			done, state := ok()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; last: %s\nprometheus:\n%.3000s", what, d, state, out)
			}
			time.Sleep(100 * time.Millisecond) // a poll interval, not a wait for an event
		}
	}
	type vector struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	query := func(q string) (vector, error) {
		var v vector
		return v, api("/api/v1/query?query="+url.QueryEscape(q), &v)
	}
	// Scraped: every node reports three members.
	poll("three targets reporting three members", 60*time.Second, func() (bool, string) {
		v, err := query(`ringlimit_members{job="` + job + `"} == 3`)
		return err == nil && len(v.Data.Result) == 3, fmt.Sprintf("%+v %v", v.Data.Result, err)
	})
	// Every rule evaluated, without error.
	type ruleState struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					State     string `json:"state"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	var rs ruleState
	poll("every rule evaluated without error", 30*time.Second, func() (bool, string) {
		rs = ruleState{}
		if err := api("/api/v1/rules", &rs); err != nil || len(rs.Data.Groups) == 0 {
			return false, fmt.Sprint(err)
		}
		for _, g := range rs.Data.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					return false, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError)
				}
			}
		}
		return true, ""
	})
	for _, g := range rs.Data.Groups {
		for _, r := range g.Rules {
			if r.State != "inactive" {
				t.Errorf("a healthy cluster: %s is %s", r.Name, r.State)
			}
		}
	}

	// n3 stops answering scrapes and leaves the ring.
	servers[2].Close()
	if err := c.Nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	poll("RinglimitTargetDown and RinglimitMemberMissing pending", 60*time.Second, func() (bool, string) {
		var a struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if err := api("/api/v1/alerts", &a); err != nil {
			return false, err.Error()
		}
		seen := map[string]int{}
		for _, al := range a.Data.Alerts {
			if al.State == "pending" {
				seen[al.Labels["alertname"]]++
			}
		}
		down := seen["RinglimitTargetDown"] == 1
		missing := seen["RinglimitMemberMissing"] == 2 // n1 and n2 each see 2 of 3 targets
		return down && missing, fmt.Sprintf("%+v", a.Data.Alerts)
	})
}
