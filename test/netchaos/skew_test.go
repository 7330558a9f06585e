package netchaos

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// Clock skew. Owners decide on their own clocks; states move between
// clocks when a key changes owner (hand-off on leave and join, the pull of
// a new owner), when an owner writes them behind to the store (whose
// scripts read the server's TIME), and when a successor loads them from
// there. A token bucket stores its level and the time of its last update:
// a state moved to a clock d ahead refills d × rate that never elapsed; one
// moved to a clock d behind refills nothing until that clock passes the
// stamp, so the key is denied d longer.
//
// The bound asserted, for a key under saturating load for T (its first
// call's start to its last call's answer, on the harness's clock):
//
//	admitted ≤ burst + ⌈rate × T⌉ + moves × ⌈rate × maxSkew⌉ + lag
//
// where moves is the number of times the key's state may have moved to a
// clock ahead of the one before (one per leave/join round trip or crash of
// its owner: out and back, only one of the two is ahead), maxSkew is the
// largest difference between two clocks (the store's is the host's), and
// lag is what a crash loses: the admissions of the write-behind interval
// (100 ms) not yet written, one call at this load. And no key waits longer
// between two admissions than 1/rate + maxSkew + skewSlack.
var (
	skewOffsets = []time.Duration{-time.Second, 0, time.Second}
	skewRule    = chaoskit.Rule{Algorithm: "token_bucket", Limit: 10, Window: 5 * time.Second}
)

const skewSlack = time.Second // detection, hand-off and scheduling on a loaded machine

func maxSkew() time.Duration {
	return slices.Max(skewOffsets) - min(slices.Min(skewOffsets), 0)
}

func skewRate() float64 { return float64(skewRule.Limit) / skewRule.Window.Seconds() }

// skewAllowance is what a key may admit over span with no fault: the burst
// plus the refill, and one for the integer rounding.
func skewAllowance(span time.Duration) int {
	return skewRule.Limit + int(math.Ceil(skewRate()*span.Seconds())) + 1
}

// skewMove is what one move of a state to a clock ahead may add.
func skewMove() int { return int(math.Ceil(skewRate() * maxSkew().Seconds())) }

// maxGap is the longest a key under load waited between two admissions.
func maxGap(ks *chaoskit.KeyStat) time.Duration {
	var g time.Duration
	prev := ks.First
	for _, a := range ks.Admits {
		g = max(g, a.Sub(prev))
		prev = a
	}
	return g
}

func gapBound() time.Duration {
	return time.Duration(float64(time.Second)/skewRate()) + maxSkew() + skewSlack
}

// skewFinish checks every key against the skew bound with moves(key)
// moves and lag(key) lost admissions, and every key's longest wait.
func skewFinish(ru *run, victims, survivors []int, moves, lag func(key string) int) row {
	var worstGap time.Duration
	var worstKey string
	extra := 0
	ru.allowance = func(k string) int {
		ks := ru.res.PerKey[k]
		return skewAllowance(ks.Last.Sub(ks.First))
	}
	// Each time a ring dropped the key's owner (a crash, a leave, or a
	// probe that timed out on a loaded machine) the key may have moved.
	bound := func(k string) int {
		return ru.allowance(k) + max(moves(k), ru.drops[ru.owner[k]])*skewMove() + lag(k)
	}
	r := ru.finish(victims, survivors, func(k string) int {
		ks := ru.res.PerKey[k]
		if g := maxGap(ks); g > worstGap {
			worstGap, worstKey = g, k
		}
		extra = max(extra, ks.Allowed-ru.allowance(k))
		return bound(k)
	})
	if worstGap > gapBound() {
		ru.t.Errorf("key %s (owner %s) waited %s between two admissions; bound 1/rate + max skew + slack = %s",
			worstKey, ru.owner[worstKey], worstGap.Round(time.Millisecond), gapBound())
	}
	r.Note += fmt.Sprintf("; most admitted beyond the fault-free allowance: %d (a move to a clock ahead may add %d); longest wait between admissions %s (bound %s)",
		extra, skewMove(), worstGap.Round(time.Millisecond), gapBound())
	return r
}

func skewNote(c *cluster) string {
	s := "clocks:"
	for _, p := range c.cnodes {
		s += fmt.Sprintf(" %s %+v", p.Name(), p.offset)
	}
	return s
}

// Under steady load nothing moves: every key's owner decides on one clock.
func skewSteady(t *testing.T, im images) row {
	ru := begin(t, im, skewOffsets, skewRule)
	time.Sleep(4 * time.Second) // steady load
	ru.r.Detect, ru.r.Recover = -1, -1
	ru.r.Note = skewNote(ru.c)
	all := ru.c.Others()
	return skewFinish(ru, nil, all, func(string) int { return 0 }, func(string) int { return 0 })
}

// A rolling restart: each node in turn stops gracefully (its keys are
// handed to their next owners, on other clocks) and starts again (they are
// handed back).
func skewRolling(t *testing.T, im images) row {
	ru := begin(t, im, skewOffsets, skewRule)
	c := ru.c
	for i := range c.cnodes {
		stop := time.Now()
		c.term(i)
		c.WaitView(c.Others(i), c.Without(i), 15*time.Second)
		ru.r.Detect = max(ru.r.Detect, time.Since(stop))
		ru.r.Recover = max(ru.r.Recover, c.restart(i))
	}
	ru.recovered()
	ru.r.Note = skewNote(c)
	all := c.Others()
	return skewFinish(ru, all, all, func(string) int { return 1 }, func(string) int { return 0 })
}

// A crash with write-behind: the node whose clock is furthest behind is
// killed; its keys go to the store (host clock) until the others drop it,
// then to their successors (which load what it wrote behind), and back to
// it when it restarts.
func skewCrash(t *testing.T, im images) row {
	ru := begin(t, im, skewOffsets, skewRule)
	c := ru.c
	v := slices.Index(skewOffsets, slices.Min(skewOffsets))
	c.kill(v)
	c.WaitView(c.Others(v), c.Without(v), 15*time.Second)
	ru.r.Detect = time.Since(ru.from)
	time.Sleep(2 * time.Second) // the node stays dead
	ru.r.Recover = c.restart(v)
	ru.recovered()
	victim := c.cnodes[v].Name()
	ru.r.Note = skewNote(c) + "; the victim is " + victim
	return skewFinish(ru, []int{v}, c.Others(v), func(k string) int {
		return b2i(ru.owner[k] == victim)
	}, func(k string) int { return 2 * b2i(ru.owner[k] == victim) })
}
