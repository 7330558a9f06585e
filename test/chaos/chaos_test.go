package chaos

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
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

// pick returns a random node index.
func pick(n int) int { return rand.IntN(n) }

// 1. A node SIGKILLed under load, then restarted with the same name and
// ports.
func nodeKill(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.kill(v)
	ru.r.detect = c.waitView(c.others(v), c.without(v), 10*time.Second)
	time.Sleep(hold) // the node stays dead
	ru.r.recover = c.restart(v)
	ru.recovered()
	victim := c.procs[v].name
	ru.r.note = "the victim is " + victim
	return ru.finish([]int{v}, c.others(v), func(k string) int {
		return keyBound(ruleLimit, b2i(ru.owner[k] == victim), true, 1)
	}, false)
}

// 2. A rolling restart: each node in turn gets SIGTERM (it closes, leaving
// the cluster gracefully, and exits), then starts again.
func rollingRestart(t *testing.T, bin string) row {
	ru := begin(t, bin, 3)
	c := ru.c
	all := c.others()
	for i := range c.procs {
		c.term(i)
		ru.r.detect = max(ru.r.detect, c.waitView(c.others(i), c.without(i), 10*time.Second))
		c.exited(i)
		ru.r.recover = max(ru.r.recover, c.restart(i))
	}
	ru.recovered()
	// Every node restarted: each is compared with its first incarnation.
	return ru.finish(all, all, func(string) int { return keyBound(ruleLimit, 1, true, 1) }, false)
}

// 3. A node SIGSTOPped (a gray failure: its sockets stay open, nothing
// answers), then SIGCONT.
func nodeStop(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.down(v)
	c.signal(v, syscall.SIGSTOP)
	stopped := time.Now()
	ru.r.detect = c.waitView(c.others(v), c.without(v), hold)
	time.Sleep(time.Until(stopped.Add(hold))) // the rest of the stop
	c.signal(v, syscall.SIGCONT)
	ru.r.recover = c.waitConverged(c.names(), 15*time.Second)
	c.procs[v].up.Store(true)
	ru.recovered()
	victim := c.procs[v].name
	ru.r.note = "the victim is " + victim
	return ru.finish([]int{v}, c.others(v), func(k string) int {
		return keyBound(ruleLimit, b2i(ru.owner[k] == victim), false, 1)
	}, false)
}

// 4. The store SIGKILLed, then restarted (empty). The store decides only
// for keys whose owner cannot be reached, so the other nodes' peer links to one node are cut
// (gossip still flows: every ring keeps it) from before the fault until
// after it: the other nodes' calls on its keys go to the store, then, while
// it is dead, to the fail-open policy.
func storeKill(t *testing.T, bin string, hold time.Duration) row {
	return storeFault(t, bin, hold, true)
}

// 5. The store SIGSTOPped (hung: connections open, no answers), then
// SIGCONT; one node's peer links cut as in storeKill.
func storeStop(t *testing.T, bin string, hold time.Duration) row {
	return storeFault(t, bin, hold, false)
}

func storeFault(t *testing.T, bin string, hold time.Duration, kill bool) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.cutPeers(v)
	if ru.l.firstSource(time.Now(), "store", 5*time.Second) < 0 {
		t.Fatal("no store decisions with the peer links cut")
	}
	ru.from = time.Now()
	if kill {
		c.store.Kill()
	} else {
		c.store.Pause()
	}
	ru.r.detect = ru.l.firstSource(ru.from, "fallback", hold)
	time.Sleep(time.Until(ru.from.Add(hold))) // the store stays down
	back := time.Now()
	storeInc := 1
	if kill {
		c.store.Restart()
		storeInc = 2
	} else {
		c.store.Resume()
	}
	ru.r.recover = ru.l.firstSource(back, "store", 10*time.Second)
	if ru.r.recover < 0 {
		t.Errorf("no store decisions within 10s of the store's return")
	}
	c.heal()
	ru.recovered()
	victim := c.procs[v].name
	ru.r.note = fmt.Sprintf("the victim is %s, whose inbound peer links were cut throughout (it stayed up and in every ring)", victim)
	return ru.finish([]int{v}, c.others(), func(k string) int {
		if ru.owner[k] == victim {
			return cutOffBound(ruleLimit, storeInc)
		}
		return ruleLimit
	}, true)
}

// 6. A node and the store SIGKILLed at once, then both restarted.
func bothKill(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.store.Kill()
	c.kill(v)
	ru.r.detect = c.waitView(c.others(v), c.without(v), 10*time.Second)
	time.Sleep(hold) // both stay dead
	start := time.Now()
	c.store.Restart()
	c.restart(v)
	ru.r.recover = time.Since(start)
	ru.recovered()
	victim := c.procs[v].name
	ru.r.note = "the victim is " + victim
	// Two store incarnations; fail-open admissions on top.
	return ru.finish([]int{v}, c.others(v), func(k string) int {
		return keyBound(ruleLimit, b2i(ru.owner[k] == victim), true, 2)
	}, true)
}

// 7. A 2|1 partition of the gossip and peer traffic, then healed. Each side
// owns every key it can see. The keys owned by the lone node count as the
// victim's; every key is cut off from its owner on one side.
func partition(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c := ru.c
	lone := pick(3)
	major := c.others(lone)
	c.partition(major, []int{lone})
	ru.r.detect = max(
		c.waitView(major, c.without(lone), 10*time.Second),
		c.waitView([]int{lone}, []string{c.procs[lone].name}, 10*time.Second))

	// Keys first used while split: each side is exact on its own.
	pkeys, _ := makeKeys(t.Name()+"-split", c.names(), keysPerNode)
	ru.l.setKeys(pkeys)
	time.Sleep(hold) // the split lasts
	ru.l.setKeys(ru.keys)
	c.heal()
	ru.r.recover = c.waitConverged(c.names(), 15*time.Second)
	ru.recovered()

	ru.l.mu.Lock()
	side := func(name string) int { return b2i(name == c.procs[lone].name) }
	worst, least := [2]int{}, [2]int{ruleLimit, ruleLimit}
	for _, k := range pkeys {
		var got, tried [2]int
		ks := ru.l.perKey[k]
		if ks == nil {
			t.Errorf("split key %s: no calls", k)
			continue
		}
		for name, n := range ks.allowedBy {
			got[side(name)] += n
		}
		for name, n := range ks.attemptsBy {
			tried[side(name)] += n
		}
		for s := range got {
			worst[s], least[s] = max(worst[s], got[s]), min(least[s], got[s])
			if got[s] > partitionSideBound(ruleLimit) {
				t.Errorf("split key %s: side %d admitted %d, limit %d (%v)", k, s, got[s], ruleLimit, ks.allowedBy)
			}
			// Exact: a side that was asked more than the limit admitted it all.
			if tried[s] > ruleLimit && got[s] < ruleLimit {
				t.Errorf("split key %s: side %d admitted %d of %d calls, limit %d", k, s, got[s], tried[s], ruleLimit)
			}
		}
		if f := ks.allowedFrom["store"] + ks.allowedFrom["fallback"]; f > 0 {
			t.Errorf("split key %s: %d admissions from store/fallback: a side did not own it", k, f)
		}
	}
	ru.l.mu.Unlock()
	ru.r.note = fmt.Sprintf("the lone node is %s; keys first used while split: %d–%d (majority side) and %d–%d (minority side) admitted per key, limit %d per side",
		c.procs[lone].name, least[0], worst[0], least[1], worst[1], ruleLimit)
	return ru.finish([]int{lone}, c.others(), func(string) int { return keyBound(ruleLimit, 1, false, 1) }, false)
}

// 8. Churn: every period, SIGKILL a random node, wait until the others see
// it gone, restart it. The first node is never killed: it is the witness
// that the churn leaks nothing, and its keys must stay exact.
func churn(t *testing.T, bin string, total time.Duration) row {
	const period = 2 * time.Second
	ru := begin(t, bin, 5)
	c := ru.c
	faults := map[string]int{}
	end := time.Now().Add(total)
	for next := time.Now(); next.Before(end); next = next.Add(period) {
		time.Sleep(time.Until(next)) // the churn's period
		v := 1 + pick(len(c.procs)-1)
		faults[c.procs[v].name]++
		c.kill(v)
		ru.r.detect = max(ru.r.detect, c.waitView(c.others(v), c.without(v), 10*time.Second))
		ru.r.recover = max(ru.r.recover, c.restart(v))
	}
	ru.recovered()
	var victims, survivors []int
	for i, p := range c.procs {
		if faults[p.name] > 0 {
			victims = append(victims, i)
		} else {
			survivors = append(survivors, i)
		}
	}
	var kills []string
	for _, p := range c.procs {
		kills = append(kills, fmt.Sprintf("%s×%d", p.name, faults[p.name]))
	}
	ru.r.note = "kills: " + strings.Join(kills, " ")
	return ru.finish(victims, survivors, func(k string) int {
		return keyBound(ruleLimit, faults[ru.owner[k]], true, 1)
	}, false)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
