package chaos

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

var (
	resultsFile = flag.String("chaos.results", "", "also write the results table to this file (e.g. RESULTS.md)")
	logsDir     = flag.String("chaos.logs", "", "keep the nodes' logs in this folder, with each node's hand-off trace (chaosnode -trace)")
)

// TestChaos runs every scenario against its own fresh cluster and store,
// then prints the table of figures.
func TestChaos(t *testing.T) {
	bin := buildNode(t, t.TempDir())
	short := testing.Short()
	dur := func(full, brief time.Duration) time.Duration {
		if short {
			return brief
		}
		return full
	}
	var rows []row
	scenarios := []struct {
		name string
		run  func(t *testing.T, bin string) row
	}{
		{"node-kill", func(t *testing.T, bin string) row { return nodeKill(t, bin, dur(2*time.Second, time.Second)) }},
		{"rolling-restart", rollingRestart},
		{"node-sigstop", func(t *testing.T, bin string) row { return nodeStop(t, bin, dur(10*time.Second, 3*time.Second)) }},
		{"store-kill", func(t *testing.T, bin string) row { return storeKill(t, bin, dur(3*time.Second, time.Second)) }},
		{"store-sigstop", func(t *testing.T, bin string) row { return storeStop(t, bin, dur(5*time.Second, 2*time.Second)) }},
		{"node+store-kill", func(t *testing.T, bin string) row { return bothKill(t, bin, dur(3*time.Second, time.Second)) }},
		{"partition-2|1", func(t *testing.T, bin string) row { return partition(t, bin, dur(5*time.Second, 2*time.Second)) }},
		{"churn", func(t *testing.T, bin string) row { return churn(t, bin, dur(30*time.Second, 8*time.Second)) }},
	}
	start := time.Now()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := sc.run(t, bin)
			r.Name, r.Failed = sc.name, t.Failed()
			rows = append(rows, r)
		})
	}
	cmd := "go test -count=1 -v"
	if raceEnabled {
		cmd += " -race"
	}
	if short {
		cmd += " -short"
	}
	cmd += " ./test/chaos/"
	table := renderTable(rows, cmd, time.Since(start))
	fmt.Println(table)
	if *resultsFile != "" {
		if err := os.WriteFile(*resultsFile, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// run is one scenario in progress.
type run struct {
	t     *testing.T
	c     *cluster
	l     *chaoskit.Load
	keys  []string
	owner map[string]string
	base  map[int]chaoskit.Stats
	from  time.Time // the fault began
	to    time.Time // the cluster had recovered
	r     row
}

const keysPerNode = 8

// begin starts a cluster of n nodes, warms it up (peer connections, the
// store connection), records each node's goroutines and open files, and
// starts the load.
func begin(t *testing.T, bin string, n int) *run {
	c := startCluster(t, bin, n)
	keys, owner := chaoskit.MakeKeys(t.Name(), c.Names(), keysPerNode)
	chaoskit.WarmUp(t, loadConfig(), c.Targets())
	ru := &run{t: t, c: c, keys: keys, owner: owner, base: map[int]chaoskit.Stats{}}
	for i := range c.procs {
		ru.base[i] = settledStats(t, c, i)
	}
	ru.l = c.startLoad(keys)
	time.Sleep(time.Second) // load before the fault: every key reaches its limit
	ru.from = time.Now()
	return ru
}

// settledStats polls node i's stats until two readings a little apart agree
// on goroutines and files (connections the harness just closed are gone).
func settledStats(t *testing.T, c *cluster, i int) chaoskit.Stats {
	t.Helper()
	n := c.Nodes[i]
	deadline := time.Now().Add(5 * time.Second)
	prev, err := n.Stats()
	for {
		if err != nil {
			t.Fatalf("stats %s: %v", n.Name(), err)
		}
		time.Sleep(50 * time.Millisecond) // between readings
		s, err2 := n.Stats()
		if err2 == nil && s.Goroutines == prev.Goroutines && s.FDs == prev.FDs || time.Now().After(deadline) {
			return s
		}
		prev, err = s, err2
	}
}

// recovered marks the end of the fault window.
func (ru *run) recovered() { ru.to = time.Now() }

// finish stops the load, measures, checks for leaks in survivors and checks
// every key against bound (the fallback admissions of a key are added to its
// bound only if allowFallback). victims are the node indexes faulted.
func (ru *run) finish(victims, survivors []int, bound func(key string) int, allowFallback bool) row {
	t, c := ru.t, ru.c
	if ru.to.IsZero() {
		ru.recovered()
	}
	time.Sleep(500 * time.Millisecond) // load after recovery
	res := ru.l.Stop()
	r := &ru.r
	r.Nodes = len(c.procs)

	// Latency: during the fault, and the worst of the whole run.
	all := r.Report(t, res, ru.from, ru.to)
	if r.Max > maxCallLatency {
		n := len(all) - sort(all, maxCallLatency)
		t.Errorf("%d calls took longer than %s (forward %s + store %s, each with its stall credit, + margin %s); the slowest %s",
			n, maxCallLatency, forwardTimeout, storeTimeout, callMargin, r.Max)
	}

	// Admissions against the limit.
	victimNames := map[string]bool{}
	for _, i := range victims {
		victimNames[c.procs[i].Name()] = true
	}
	for _, k := range ru.keys {
		ks := res.PerKey[k]
		if ks == nil {
			t.Errorf("key %s: no calls", k)
			continue
		}
		g := &r.Other
		if victimNames[ru.owner[k]] {
			g = &r.Victim
		}
		b := bound(k)
		g.Add(ks, ruleLimit, b)
		if allowFallback {
			b += ks.AllowedFrom["fallback"]
		}
		if ks.Allowed > b {
			t.Errorf("key %s (owner %s): admitted %d, bound %d (limit %d; by source %v, by node %v)",
				k, ru.owner[k], ks.Allowed, b, ruleLimit, ks.AllowedFrom, ks.AllowedBy)
		}
		if ks.Attempts < 2*ruleLimit {
			t.Errorf("key %s: only %d calls: too few to test the limit", k, ks.Attempts)
		}
	}

	// No leaks: a survivor's goroutines and files come back near baseline.
	r.Leak = c.CheckLeaks(ru.base, survivors)
	return *r
}

// sort returns how many of the sorted durations are at most d.
func sort(sorted []time.Duration, d time.Duration) int {
	n, _ := slices.BinarySearch(sorted, d+1)
	return n
}
