package netchaos

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// demoSummary is the part of cmd/demo-cluster's JSON summary (the last line
// it prints) that TestDemoQuarterCPU checks.
type demoSummary struct {
	Summary struct {
		Requests   int `json:"requests"`
		Errors     int `json:"errors"`
		AllWindows struct {
			Windows     int `json:"windows"`
			MaxAdmitted int `json:"max_admitted"`
			OverLimit   int `json:"over_limit"`
			Over        []struct {
				Key      string  `json:"key"`
				At       float64 `json:"at_s"`
				Admitted int     `json:"admitted"`
			} `json:"over"`
		} `json:"all_windows"`
		Phases []struct {
			Name    string         `json:"name"`
			Sources map[string]int `json:"sources"`
		} `json:"phases"`
	} `json:"summary"`
}

// The demo cluster (three node processes, the store and the traffic, all
// in one cgroup) at a quarter of one CPU, with no fault, for 60 s: slow is
// not dead, so no key-window goes over its limit, no decision falls back
// and no caller sees an error.
func TestDemoQuarterCPU(t *testing.T) {
	q := newCPUQuota(t, 25*time.Millisecond)
	bin := filepath.Join(t.TempDir(), "demo-cluster")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/demo-cluster").CombinedOutput(); err != nil {
		t.Fatalf("go build demo-cluster: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := q.command(ctx, bin, "-plain", "-duration", "60s")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	t.Logf("the cgroup was %s", q.throttled())
	if err != nil {
		t.Fatalf("demo-cluster: %v\n%s", err, tail(string(out), 40))
	}
	ls := lines(string(out))
	var s demoSummary
	if len(ls) == 0 || json.Unmarshal([]byte(ls[len(ls)-1]), &s) != nil || len(s.Summary.Phases) == 0 {
		t.Fatalf("no JSON summary at the end of the demo's output:\n%s", tail(string(out), 40))
	}
	sum, w := s.Summary, s.Summary.AllWindows
	src := sum.Phases[0].Sources
	t.Logf("%d requests, %d errors; sources local %d, peer %d, store %d, fallback %d; %d of %d key-windows over the limit, max %d admitted",
		sum.Requests, sum.Errors, src["local"], src["peer"], src["store"], src["fallback"], w.OverLimit, w.Windows, w.MaxAdmitted)
	if sum.Errors > 0 {
		t.Errorf("%d caller errors", sum.Errors)
	}
	if w.OverLimit > 0 {
		t.Errorf("%d key-windows over the limit: %+v", w.OverLimit, w.Over)
	}
	if src["fallback"] > 0 {
		t.Errorf("%d fail-open decisions while the store and every node were up", src["fallback"])
	}
	if t.Failed() {
		t.Logf("the demo's output:\n%s", tail(string(out), 40))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
