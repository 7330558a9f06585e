package chaos

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

var resultsFile = flag.String("chaos.results", "", "also write the results table to this file (e.g. RESULTS.md)")

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
			r.name, r.failed = sc.name, t.Failed()
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
	l     *load
	keys  []string
	owner map[string]string
	base  map[int]nodeStats
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
	keys, owner := makeKeys(t.Name(), c.names(), keysPerNode)
	warm, _ := makeKeys(t.Name()+"-warm", c.names(), 2)
	wl := startLoad(c, warm)
	time.Sleep(500 * time.Millisecond) // the warm-up's length
	wl.stop()
	if wl.errs > 0 {
		t.Fatalf("errors during warm-up: %v", wl.errSamples)
	}
	ru := &run{t: t, c: c, keys: keys, owner: owner, base: map[int]nodeStats{}}
	for i := range c.procs {
		ru.base[i] = settledStats(t, c, i)
	}
	ru.l = startLoad(c, keys)
	time.Sleep(time.Second) // load before the fault: every key reaches its limit
	ru.from = time.Now()
	return ru
}

// settledStats polls node i's stats until two readings a little apart agree
// on goroutines and files (connections the harness just closed are gone).
func settledStats(t *testing.T, c *cluster, i int) nodeStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	prev, err := c.stats(i)
	for {
		if err != nil {
			t.Fatalf("stats %s: %v", c.procs[i].name, err)
		}
		time.Sleep(50 * time.Millisecond) // between readings
		s, err2 := c.stats(i)
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
	t, c, l := ru.t, ru.c, ru.l
	if ru.to.IsZero() {
		ru.recovered()
	}
	time.Sleep(500 * time.Millisecond) // load after recovery
	l.stop()
	r := &ru.r
	r.nodes = len(c.procs)
	r.calls, r.errs, r.deadCalls, r.deadErrs = l.calls, l.errs, l.deadCalls, l.deadErrs
	r.sources = l.sources

	// Callers of nodes that stayed up never see an error.
	if l.errs > 0 {
		t.Errorf("%d caller errors from nodes that were up, e.g. %q", l.errs, l.errSamples)
	}

	// Latency: during the fault, and the worst of the whole run.
	during := l.latencies(ru.from, ru.to)
	all := l.latencies(time.Time{}, time.Now().Add(time.Hour))
	r.p50, r.p99 = percentile(during, 0.50), percentile(during, 0.99)
	if len(all) > 0 {
		r.max = all[len(all)-1]
	}
	if r.max > maxCallLatency {
		n := len(all) - sort(all, maxCallLatency)
		t.Errorf("%d calls took longer than %s (forward %s + store %s + margin %s); the slowest %s",
			n, maxCallLatency, forwardTimeout, storeTimeout, callMargin, r.max)
	}

	// Admissions against the limit.
	victimNames := map[string]bool{}
	for _, i := range victims {
		victimNames[c.procs[i].name] = true
	}
	for _, k := range ru.keys {
		ks := l.perKey[k]
		if ks == nil {
			t.Errorf("key %s: no calls", k)
			continue
		}
		g := &r.other
		if victimNames[ru.owner[k]] {
			g = &r.victim
		}
		g.keys++
		g.admitted += ks.allowed
		g.limit += ruleLimit
		g.fallback += ks.allowedFrom["fallback"]
		g.worst = max(g.worst, float64(ks.allowed)/ruleLimit)
		b := bound(k)
		if allowFallback {
			b += ks.allowedFrom["fallback"]
		}
		g.bound = max(g.bound, float64(bound(k))/ruleLimit)
		if ks.allowed > b {
			t.Errorf("key %s (owner %s): admitted %d, bound %d (limit %d; by source %v, by node %v)",
				k, ru.owner[k], ks.allowed, b, ruleLimit, ks.allowedFrom, ks.allowedBy)
		}
		if ks.attempts < 2*ruleLimit {
			t.Errorf("key %s: only %d calls: too few to test the limit", k, ks.attempts)
		}
	}

	// No leaks: a survivor's goroutines and files come back near baseline.
	for _, i := range survivors {
		b := ru.base[i]
		deadline := time.Now().Add(10 * time.Second)
		var s nodeStats
		var err error
		for {
			s, err = c.stats(i)
			if err == nil && s.Goroutines <= b.Goroutines+goroutineSlack && s.FDs <= b.FDs+fdSlack {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s leaks: goroutines %d → %d, fds %d → %d (err %v)",
					c.procs[i].name, b.Goroutines, s.Goroutines, b.FDs, s.FDs, err)
				break
			}
			time.Sleep(50 * time.Millisecond) // poll interval
		}
		r.leak = append(r.leak, fmt.Sprintf("%s %d→%d/%d→%d", c.procs[i].name, b.Goroutines, s.Goroutines, b.FDs, s.FDs))
	}
	return *r
}

// sort returns how many of the sorted durations are at most d.
func sort(sorted []time.Duration, d time.Duration) int {
	n, _ := slices.BinarySearch(sorted, d+1)
	return n
}
