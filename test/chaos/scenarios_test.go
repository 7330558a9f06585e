package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// pick returns a random node index.
func pick(n int) int { return rand.IntN(n) }

// 1. A node SIGKILLed under load, then restarted with the same name and
// ports.
func nodeKill(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.kill(v)
	ru.r.Detect = c.WaitView(c.Others(v), c.Without(v), 10*time.Second)
	time.Sleep(hold) // the node stays dead
	ru.r.Recover = c.restart(v)
	ru.recovered()
	victim := c.procs[v].Name()
	ru.r.Note = "the victim is " + victim
	return ru.finish([]int{v}, c.Others(v), func(k string) int {
		return chaoskit.KeyBound(ruleLimit, b2i(ru.owner[k] == victim), true, 1)
	}, false)
}

// 2. A rolling restart: each node in turn gets SIGTERM (it closes, leaving
// the cluster gracefully, and exits), then starts again.
func rollingRestart(t *testing.T, bin string) row {
	ru := begin(t, bin, 3)
	c := ru.c
	all := c.Others()
	for i := range c.procs {
		c.term(i)
		ru.r.Detect = max(ru.r.Detect, c.WaitView(c.Others(i), c.Without(i), 10*time.Second))
		c.exited(i)
		ru.r.Recover = max(ru.r.Recover, c.restart(i))
	}
	ru.recovered()
	// Every key's state was handed on at each leave: nothing extra.
	return ru.finish(all, all, func(string) int { return leaveBound(ruleLimit) }, false)
}

// 3. A node SIGSTOPped (a gray failure: its sockets stay open, nothing
// answers), then SIGCONT.
func nodeStop(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c, v := ru.c, pick(3)
	c.procs[v].Down()
	c.signal(v, syscall.SIGSTOP)
	stopped := time.Now()
	ru.r.Detect = c.WaitView(c.Others(v), c.Without(v), hold)
	time.Sleep(time.Until(stopped.Add(hold))) // the rest of the stop
	c.signal(v, syscall.SIGCONT)
	ru.r.Recover = c.WaitConverged(c.Names(), 15*time.Second)
	c.procs[v].On()
	ru.recovered()
	victim := c.procs[v].Name()
	ru.r.Note = "the victim is " + victim
	// A forward to the stopped node, and then the store, that outlive their
	// timeouts go to the fail-open policy: its admissions are the policy's,
	// counted, and added to the key's bound (beside busy loops and other
	// work a key admitted 11 of 10, one of them by the policy).
	return ru.finish([]int{v}, c.Others(v), func(k string) int {
		return chaoskit.KeyBound(ruleLimit, b2i(ru.owner[k] == victim), false, 1)
	}, true)
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
	if ru.l.FirstSource(time.Now(), 5*time.Second, "store") < 0 {
		t.Fatal("no store decisions with the peer links cut")
	}
	ru.from = time.Now()
	if kill {
		c.store.Kill()
	} else {
		c.store.Pause()
	}
	ru.r.Detect = ru.l.FirstSource(ru.from, hold, "fallback")
	time.Sleep(time.Until(ru.from.Add(hold))) // the store stays down
	back := time.Now()
	storeInc := 1
	if kill {
		c.store.Restart()
		storeInc = 2
	} else {
		c.store.Resume()
	}
	ru.r.Recover = ru.l.FirstSource(back, 10*time.Second, "store")
	if ru.r.Recover < 0 {
		t.Errorf("no store decisions within 10s of the store's return")
	}
	c.heal()
	ru.recovered()
	victim := c.procs[v].Name()
	ru.r.Note = fmt.Sprintf("the victim is %s, whose inbound peer links were cut throughout (it stayed up and in every ring)", victim)
	return ru.finish([]int{v}, c.Others(), func(k string) int {
		if ru.owner[k] == victim {
			return chaoskit.CutOffBound(ruleLimit, storeInc)
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
	ru.r.Detect = c.WaitView(c.Others(v), c.Without(v), 10*time.Second)
	time.Sleep(hold) // both stay dead
	start := time.Now()
	c.store.Restart()
	c.restart(v)
	ru.r.Recover = time.Since(start)
	ru.recovered()
	victim := c.procs[v].Name()
	ru.r.Note = "the victim is " + victim
	// Two store incarnations; fail-open admissions on top.
	return ru.finish([]int{v}, c.Others(v), func(k string) int {
		return chaoskit.KeyBound(ruleLimit, b2i(ru.owner[k] == victim), true, 2)
	}, true)
}

// 7. A 2|1 partition of the gossip and peer traffic, then healed. Each side
// owns every key it can see. The keys owned by the lone node count as the
// victim's; every key is cut off from its owner on one side.
func partition(t *testing.T, bin string, hold time.Duration) row {
	ru := begin(t, bin, 3)
	c := ru.c
	lone := pick(3)
	major := c.Others(lone)
	c.partition(major, []int{lone})
	ru.r.Detect = max(
		c.WaitView(major, c.Without(lone), 10*time.Second),
		c.WaitView([]int{lone}, []string{c.procs[lone].Name()}, 10*time.Second))

	// Keys first used while split: each side is exact on its own.
	pkeys, _ := chaoskit.MakeKeys(t.Name()+"-split", c.Names(), keysPerNode)
	ru.l.SetKeys(pkeys)
	time.Sleep(hold) // the split lasts
	ru.l.SetKeys(ru.keys)
	c.heal()
	ru.r.Recover = c.WaitConverged(c.Names(), 15*time.Second)
	ru.recovered()

	split := ru.l.Snapshot()
	side := func(name string) int { return b2i(name == c.procs[lone].Name()) }
	worst, least := [2]int{}, [2]int{ruleLimit, ruleLimit}
	for _, k := range pkeys {
		var got [2]int
		ks := split.PerKey[k]
		if ks == nil {
			t.Errorf("split key %s: no calls", k)
			continue
		}
		for name, n := range ks.AllowedBy {
			got[side(name)] += n
		}
		for s := range got {
			worst[s], least[s] = max(worst[s], got[s]), min(least[s], got[s])
			if got[s] > partitionSideBound(ruleLimit) {
				t.Errorf("split key %s: side %d admitted %d, limit %d (%v)", k, s, got[s], ruleLimit, ks.AllowedBy)
			}
			// Not exact from below: both sides share the store, so a side
			// that takes a key over loads what the other side wrote behind
			// for it, and admits less than a whole limit of its own. The
			// table reports the least admitted per side.
		}
		if f := ks.AllowedFrom["store"] + ks.AllowedFrom["fallback"]; f > 0 {
			t.Errorf("split key %s: %d admissions from store/fallback: a side did not own it", k, f)
		}
	}
	ru.r.Note = fmt.Sprintf("the lone node is %s; keys first used while split: %d–%d (majority side) and %d–%d (minority side) admitted per key, limit %d per side",
		c.procs[lone].Name(), least[0], worst[0], least[1], worst[1], ruleLimit)
	return ru.finish([]int{lone}, c.Others(), func(string) int { return chaoskit.KeyBound(ruleLimit, 1, false, 1) }, false)
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
		faults[c.procs[v].Name()]++
		c.kill(v)
		ru.r.Detect = max(ru.r.Detect, c.WaitView(c.Others(v), c.Without(v), 10*time.Second))
		ru.r.Recover = max(ru.r.Recover, c.restart(v))
	}
	ru.recovered()
	var victims, survivors []int
	for i, p := range c.procs {
		if faults[p.Name()] > 0 {
			victims = append(victims, i)
		} else {
			survivors = append(survivors, i)
		}
	}
	var kills []string
	for _, p := range c.procs {
		kills = append(kills, fmt.Sprintf("%s×%d", p.Name(), faults[p.Name()]))
	}
	ru.r.Note = "kills: " + strings.Join(kills, " ")
	// (Fail-open admissions are the policy's, added to the bound, as in
	// nodeStop: under load a key admitted 11 of 10, one by the policy.)
	return ru.finish(victims, survivors, func(k string) int {
		return chaoskit.KeyBound(ruleLimit, faults[ru.owner[k]], true, 1)
	}, true)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
