package netchaos

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

var resultsFile = flag.String("netchaos.results", "", "also write the results tables to this file (e.g. RESULTS.md)")

// scenario is one test of the container suite.
type scenario struct {
	name string
	run  func(t *testing.T, im images) row
}

// TestNetChaos runs every scenario against its own network, store and five
// node containers, then prints the table of figures (and the clock-skew
// table).
func TestNetChaos(t *testing.T) {
	requireDocker(t)
	sweep(t)
	start := time.Now()
	im := buildImages(t)
	hold := 3 * time.Second
	if testing.Short() {
		hold = 1500 * time.Millisecond
	}
	faults := []scenario{
		{"partition-3|2", func(t *testing.T, im images) row { return partition(t, im, hold) }},
		{"asymmetric-partition", func(t *testing.T, im images) row { return asymmetric(t, im, hold) }},
		{"loss-5%", func(t *testing.T, im images) row { return loss(t, im, 0.05, hold) }},
		{"loss-30%", func(t *testing.T, im images) row { return loss(t, im, 0.30, hold) }},
		{"latency-200ms", func(t *testing.T, im images) row { return latency(t, im, 200*time.Millisecond, 0, hold) }},
		{"latency-200ms+loss-5%", func(t *testing.T, im images) row { return latency(t, im, 200*time.Millisecond, 0.05, hold) }},
		{"gossip-port-blocked", func(t *testing.T, im images) row { return gossipBlocked(t, im, hold) }},
		{"peer-port-blocked", func(t *testing.T, im images) row { return peerBlocked(t, im, hold) }},
		{"restart-new-ip", func(t *testing.T, im images) row { return newIP(t, im, hold) }},
		{"store-pause", func(t *testing.T, im images) row { return storeFault(t, im, hold, false) }},
		{"store-kill", func(t *testing.T, im images) row { return storeFault(t, im, hold, true) }},
		{"CPU throttling", func(t *testing.T, im images) row { return throttle(t, im, hold) }},
		{"upgrade", func(t *testing.T, im images) row { return upgrade(t, im, hold) }},
	}
	skews := []scenario{
		{"skew-steady", skewSteady},
		{"skew-rolling-restart", skewRolling},
		{"skew-crash", skewCrash},
	}
	runAll := func(scs []scenario) []row {
		var rows []row
		for _, sc := range scs {
			var r row
			t.Run(sc.name, func(t *testing.T) {
				defer func() {
					r.Name, r.Failed, r.Skipped = sc.name, t.Failed(), t.Skipped()
					rows = append(rows, r)
					t.Logf("\n%s%s", chaoskit.TableHeader, r.Row)
				}()
				r = sc.run(t, im)
			})
		}
		return rows
	}
	faultRows := runAll(faults)
	skewRows := runAll(skews)

	cmd := "go test -count=1 -v"
	if raceEnabled {
		cmd += " -race"
	}
	if testing.Short() {
		cmd += " -short"
	}
	cmd += " ./test/netchaos/"
	var b strings.Builder
	fmt.Fprintf(&b, "# ringlimit network chaos results\n\n")
	fmt.Fprintf(&b, "Run %s UTC with `%s` (%s in all, images built; add `-netchaos.results=RESULTS.md` to write this file). ",
		time.Now().UTC().Format("2006-01-02 15:04"), cmd, time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "Five node containers (test/chaos/chaosnode, static, FROM scratch) and a store container (the host's %s and its libraries, FROM scratch) on a private internal Docker network the test creates; ",
		chaoskit.StoreName())
	fmt.Fprintf(&b, "load from the test process through each node's HTTP endpoint; faults from the engine and the kernel only (docker kill/pause/rm; iptables DROP, statistic and NFQUEUE rules in a node's network namespace via nsenter, with ./nfdelay giving queued packets their verdict after the delay). ")
	fmt.Fprintf(&b, "Failure scenarios: rule %s, limit %d per %s (the window covers the whole scenario), %d keys per node, the fault held %s; forward and store timeouts %s and %s.\n\n",
		chaosRule.Algorithm, chaosRule.Limit, chaosRule.Window, keysPerNode, hold, forwardTimeout, storeTimeout)
	b.WriteString(renderTable(faultRows))
	fmt.Fprintf(&b, "\n## Clock skew\n\nThree node containers whose clocks run %v from the host's (chaosnode -clock-offset), rule %s, limit %d per %s (so %g admissions/s refill); the in-process twin is TestSkewInProcess.\n\n",
		skewOffsets, skewRule.Algorithm, skewRule.Limit, skewRule.Window, skewRate())
	b.WriteString(renderTable(skewRows))
	b.WriteString(legend)
	fmt.Println(b.String())
	if *resultsFile != "" {
		if err := os.WriteFile(*resultsFile, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

const legend = `
Columns as test/chaos/RESULTS.md: *caller errors* are errors returned by nodes the harness had not
taken down (must be 0); calls in flight to a node the harness killed or stopped are counted apart.
*Victim's keys* are those the faulted node(s) owned before the fault; *bound* is what the test asserts
per key (bounds_test.go; skew_test.go for the skew rows, where *admitted/limit* compares with the
token bucket's exact allowance, burst + rate × the key's time under load), plus the key's fail-open
admissions as counted, and never less than one limit (one move, in the skew rows) per time one ring
dropped the key's owner (counted from the nodes' logs, listed in the notes). *Detect*: from the fault
until every node's view changed as the fault implies (or, where no view changes, until the first
store or fail-open decision). *Recover*: from the heal or restart until every node sees every member
(store faults: until the first store decision again). *Latency*: asserted on the calls to nodes that
stayed up, p99 ≤ forward + store timeout + 300 ms and max ≤ forward + store timeout + 1.5 s (a
shared machine's scheduling stalls).
`

// run is one scenario in progress.
type run struct {
	t             *testing.T
	c             *cluster
	l             *chaoskit.Load
	res           *chaoskit.Result // what l saw (finish)
	rule          chaoskit.Rule
	keys          []string
	owner         map[string]string
	base          map[int]chaoskit.Stats
	from          time.Time      // the fault began
	to            time.Time      // the cluster had recovered
	storeRestarts int            // the store was killed and started again (empty)
	drops         map[string]int // node → the most times one ring dropped it (finish)
	// planned is, for each node, the times the scenario stopped it
	// gracefully: each time its keys were handed off, so each time rings
	// dropped it for it admits nothing extra (as test/chaos's rolling
	// restart); only the drops beyond these loosen its keys' bounds.
	planned map[string]int
	// allowance, if set, is what a key may admit with no fault at all (the
	// skew rows' token bucket): the table's "limit" column.
	allowance func(key string) int
	// exact, if set, says which keys are held to their bound plus their
	// own fail-open admissions alone: no allowance for ring drops or store
	// decisions (the latency and loss rows' keys whose owner is not the
	// victim: a slow owner that answers is waited for, not replaced). A
	// fail-open decision is the policy's, by design: a forward from the
	// lossy node whose segment is lost three times outlasts the 1 s
	// ceiling, and so may its store call (CI, loss-5%: one such call, the
	// only excess on its key).
	exact func(key string) bool
	r     row
}

const keysPerNode = 4

// begin starts a cluster of len(offsets) nodes, warms it up, records each
// node's goroutines and open files, and starts the load.
func begin(t *testing.T, im images, offsets []time.Duration, ru chaoskit.Rule) *run {
	return beginLimited(t, im, offsets, ru, suiteLimits())
}

// beginLimited is begin with every node container run as lim says from its
// start.
func beginLimited(t *testing.T, im images, offsets []time.Duration, ru chaoskit.Rule, lim limits) *run {
	c := startCluster(t, im, offsets, lim)
	keys, owner := chaoskit.MakeKeys(t.Name(), c.Names(), keysPerNode)
	chaoskit.WarmUp(t, loadConfig(ru), c.Targets())
	r := &run{t: t, c: c, rule: ru, keys: keys, owner: owner, base: map[int]chaoskit.Stats{}}
	r.l = chaoskit.StartLoad(loadConfig(ru), c.Targets(), keys)
	t.Cleanup(func() { r.l.Stop() }) // a scenario that fails or skips half-way
	time.Sleep(time.Second)          // load before the fault: every key reaches its limit
	// The baseline for leaks: under load, with every peer connection made.
	for i, n := range c.Nodes {
		s, err := n.Stats()
		if err != nil {
			t.Fatalf("stats %s: %v", n.Name(), err)
		}
		r.base[i] = s
	}
	r.from = time.Now()
	return r
}

func five() []time.Duration { return make([]time.Duration, 5) }

func (ru *run) recovered() { ru.to = time.Now() }

// storeIncarnations is the number of stores the scenario ran: 2 if it
// killed and restarted the store (empty), else 1.
func (ru *run) storeIncarnations() int { return 1 + ru.storeRestarts }

// finish stops the load, measures, checks survivors for leaks and every key
// against bound, plus its fail-open admissions (a call whose owner and store
// both failed to answer in time: by design, on a loaded machine too), and
// at least the bound of the times rings dropped its owner (on a loaded
// machine gossip probes time out now and then).
func (ru *run) finish(victims, survivors []int, bound func(key string) int) row {
	t, c := ru.t, ru.c
	if ru.to.IsZero() {
		ru.recovered()
	}
	time.Sleep(500 * time.Millisecond) // load after recovery
	res := ru.l.Stop()
	ru.res = res
	r := &ru.r
	r.Nodes = len(c.cnodes)
	all := r.Report(t, res, ru.from, ru.to)
	lim := c.limits
	p99Bound, maxBound := lim.forward+lim.store+callMargin, lim.forward+lim.store+stallMargin
	if p99 := chaoskit.Percentile(all, 0.99); p99 > p99Bound {
		t.Errorf("the 99th percentile of the calls took %s, more than %s (forward %s + store %s + margin %s)",
			p99, p99Bound, lim.forward, lim.store, callMargin)
	}
	if r.Max > maxBound {
		n, _ := slices.BinarySearch(all, maxBound+1)
		t.Errorf("%d calls took longer than %s (forward %s + store %s + stall margin %s); the slowest %s",
			len(all)-n, maxBound, lim.forward, lim.store, stallMargin, r.Max)
	}

	ru.drops = c.drops()
	r.drops = ru.drops
	victimNames := map[string]bool{}
	for _, i := range victims {
		victimNames[c.cnodes[i].Name()] = true
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
		limit := ru.rule.Limit
		if ru.allowance != nil {
			limit = ru.allowance(k)
		}
		b := bound(k)
		if ru.exact != nil && ru.exact(k) {
			g.Add(ks, limit, b)
			b += ks.AllowedFrom["fallback"]
			if ks.Allowed > b {
				t.Errorf("key %s (owner %s, not the victim): admitted %d, bound %d, exact plus its fail-open admissions (by source %v, by node %v)",
					k, ru.owner[k], ks.Allowed, b, ks.AllowedFrom, ks.AllowedBy)
			}
			if ks.Attempts < 2*ru.rule.Limit {
				t.Errorf("key %s: only %d calls: too few to test the limit", k, ks.Attempts)
			}
			continue
		}
		if d := ru.drops[ru.owner[k]] - ru.planned[ru.owner[k]]; d > 0 && ru.allowance == nil {
			b = max(b, chaoskit.KeyBound(ru.rule.Limit, d, false, ru.storeIncarnations()))
		}
		if ru.allowance == nil && ks.AllowedFrom["store"] > 0 {
			// Some of its calls could not reach its owner (a forward that
			// failed or timed out, on a loaded machine too): the store
			// decided them, from what the owner wrote behind, not read
			// back by the owner.
			b = max(b, chaoskit.CutOffBound(ru.rule.Limit, ru.storeIncarnations()))
			ru.r.cutOff++
		}
		g.Add(ks, limit, b)
		b += ks.AllowedFrom["fallback"]
		if ks.Allowed > b {
			t.Errorf("key %s (owner %s): admitted %d, bound %d (limit %d; by source %v, by node %v)",
				k, ru.owner[k], ks.Allowed, b, limit, ks.AllowedFrom, ks.AllowedBy)
		}
		if ks.Attempts < 2*ru.rule.Limit {
			t.Errorf("key %s: only %d calls: too few to test the limit", k, ks.Attempts)
		}
	}
	// No leaks: a survivor's goroutines and files come back near baseline.
	r.Leak = c.CheckLeaks(ru.base, survivors)
	if t.Failed() {
		for _, p := range c.cnodes {
			t.Logf("%s's log: %s", p.Name(), p.ctr.Load().logs())
		}
	}
	return *r
}
