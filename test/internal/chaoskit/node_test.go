package chaoskit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// fakeChaosnode answers as chaosnode does. Its /stats reports only itself
// as a member for its first converge answers, then members (sorted, as
// chaosnode's), and goroutines falling by 5 an
// answer from 30 to 15.
type fakeChaosnode struct {
	name     string
	members  []string
	converge int64
	stats    atomic.Int64
}

func (f *fakeChaosnode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/allow":
		if q.Get("algorithm") != "sliding_log" || q.Get("limit") != "10" || q.Get("window") != "1h0m0s" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(chaoskit.Decision{Error: "bad rule " + r.URL.RawQuery})
			return
		}
		if q.Get("key") == "a b" {
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(chaoskit.Decision{Error: "boom"})
			return
		}
		_ = json.NewEncoder(w).Encode(chaoskit.Decision{Allowed: true, Source: "peer", Owner: "n2"})
	case "GET /healthz", "POST /chaos/heal":
		w.Write([]byte("ok\n"))
	case "GET /stats":
		n := f.stats.Add(1)
		s := chaoskit.Stats{Name: f.name, Members: []string{f.name}, Goroutines: int(max(15, 35-5*n)), FDs: 3}
		if n > f.converge {
			s.Members = f.members
		}
		_ = json.NewEncoder(w).Encode(s)
	default:
		http.NotFound(w, r)
	}
}

// startFakes starts a fake chaosnode for each name and returns a Cluster
// of them.
func startFakes(t *testing.T, names ...string) *chaoskit.Cluster {
	c := &chaoskit.Cluster{T: t, Poll: time.Millisecond}
	for _, name := range names {
		srv := httptest.NewServer(&fakeChaosnode{name: name, members: slices.Sorted(slices.Values(names)), converge: 3})
		n := chaoskit.NewNode(name, 2)
		n.SetAddr(strings.TrimPrefix(srv.URL, "http://"))
		t.Cleanup(func() {
			n.CloseIdleConnections()
			srv.Close()
		})
		c.Nodes = append(c.Nodes, n)
	}
	return c
}

func TestNode(t *testing.T) {
	n := startFakes(t, "n1").Nodes[0]
	r := chaoskit.Rule{Algorithm: "sliding_log", Limit: 10, Window: time.Hour}
	d, err := n.Allow(t.Context(), "k", r)
	if err != nil || d != (chaoskit.Decision{Allowed: true, Source: "peer", Owner: "n2"}) {
		t.Errorf("Allow = %+v, %v", d, err)
	}
	if _, err := n.Allow(t.Context(), "a b", r); err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Allow of a failing call: %v, want the status and the error", err)
	}
	if err := n.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	if err := n.Post("/chaos/heal"); err != nil {
		t.Errorf("Post /chaos/heal: %v", err)
	}
	if err := n.Post("/chaos/nothing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Post /chaos/nothing: %v, want 404", err)
	}
	if s, err := n.Stats(); err != nil || s.Name != "n1" || s.FDs != 3 {
		t.Errorf("Stats = %+v, %v", s, err)
	}
	n.On()
	if up, e := n.Live(); !up || e != 0 {
		t.Errorf("after On: up %v, epoch %d", up, e)
	}
	n.Down()
	if up, e := n.Live(); up || e != 1 {
		t.Errorf("after Down: up %v, epoch %d; want down, 1", up, e)
	}
}

func TestCluster(t *testing.T) {
	c := startFakes(t, "n2", "n1", "n3")
	if got := c.Names(); !slices.Equal(got, []string{"n2", "n1", "n3"}) {
		t.Errorf("Names = %v", got)
	}
	if got := c.Without(0, 2); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("Without(0, 2) = %v", got)
	}
	if got := c.Others(1); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Others(1) = %v", got)
	}
	// Each node sees only itself for its first three answers.
	if d := c.WaitConverged([]string{"n3", "n1", "n2"}, 5*time.Second); d <= 0 {
		t.Errorf("WaitConverged took %s", d)
	}
	if up, _ := c.Nodes[0].Live(); up {
		t.Errorf("a new node is on")
	}

	// Fresh nodes, whose goroutines fall from 30 to 15, within the slack
	// of 5, only at their fourth answer.
	c = startFakes(t, "n2", "n1")
	base := map[int]chaoskit.Stats{0: {Goroutines: 5, FDs: 3}, 1: {Goroutines: 5, FDs: 3}}
	leak := c.CheckLeaks(base, []int{0, 1})
	if want := []string{"n2 5→15/3→3", "n1 5→15/3→3"}; !slices.Equal(leak, want) {
		t.Errorf("CheckLeaks = %q, want %q", leak, want)
	}
}
