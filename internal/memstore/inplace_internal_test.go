package memstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// pointClock is a clock that reads *t.
type pointClock struct{ t *time.Time }

func (c pointClock) Now() time.Time { return *c.t }

// AllowAll's fast path (inPlace) decides as its general path does: two
// limiters, one of which always takes the general path, are given the same
// random calls (AllowAllAt with 1–3 rules of every algorithm and n of 0–2,
// AllowNAt, Drain) on a few keys, in small shards that evict, with time
// going forward by 0–3 ms and now and then back, and calls at instants up
// to 1 ms before the clock's. After each call their answers, every state
// they hold (Range), their bytes and what Drain writes behind must agree.
func TestInPlaceDecidesAsTheGeneralPath(t *testing.T) {
	pool := []ringlimit.Rule{
		{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: 10 * time.Millisecond},
		{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: 10 * time.Millisecond},
		{Algorithm: ringlimit.TokenBucket, Limit: 2, Window: 10 * time.Millisecond, Burst: 4},
		{Algorithm: ringlimit.TokenBucket, Limit: 3, Window: 10 * time.Millisecond},
		{Algorithm: ringlimit.LeakyBucket, Limit: 2, Window: 8 * time.Millisecond, Burst: 3},
		{Algorithm: ringlimit.SlidingWindow, Limit: 4, Window: 10 * time.Millisecond},
		{Algorithm: ringlimit.SlidingWindow, Limit: 2, Window: 10 * time.Millisecond},
		{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: 10 * time.Millisecond},
	}
	seeds := 150
	if testing.Short() {
		seeds = 30
	}
	inPlace := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		now := time.UnixMilli(1_000_000)
		cfg := Config{Clock: pointClock{&now}, TrackChanges: r.IntN(2) == 0, MaxKeys: 6 + r.IntN(20)}
		fast, general := New(cfg), New(cfg)
		fast.hooks, general.hooks = &testHooks{}, &testHooks{general: true}
		var steps []string
		for step := range 200 {
			if r.IntN(10) == 0 {
				now = now.Add(-time.Duration(r.IntN(3)) * time.Millisecond)
			} else {
				now = now.Add(time.Duration(r.IntN(4)) * time.Millisecond)
			}
			at := now.Add(-time.Duration(r.IntN(2)) * time.Millisecond)
			key := fmt.Sprint("k", r.IntN(3))
			var op, a, g string
			switch x := r.IntN(10); {
			case x < 7:
				rules := make([]ringlimit.Rule, 1+r.IntN(3))
				for i := range rules {
					rules[i] = pool[r.IntN(len(pool))]
				}
				n := int64(r.IntN(3))
				op = fmt.Sprintf("AllowAllAt(%d, %s, %v, %d)", at.UnixMilli(), key, rules, n)
				da, ea := fast.AllowAllAt(at, key, rules, n)
				dg, eg := general.AllowAllAt(at, key, rules, n)
				a, g = fmt.Sprint(da, ea), fmt.Sprint(dg, eg)
			case x < 9:
				rule, n := pool[r.IntN(len(pool))], int64(r.IntN(2))
				op = fmt.Sprintf("AllowNAt(%d, %s, %v, %d)", at.UnixMilli(), key, rule, n)
				da, ea := fast.AllowNAt(at, key, rule, n)
				dg, eg := general.AllowNAt(at, key, rule, n)
				a, g = fmt.Sprint(da, ea), fmt.Sprint(dg, eg)
			default:
				op, a, g = "Drain", drained(fast), drained(general)
			}
			steps = append(steps, fmt.Sprintf("%d now=%d %s: %s", step, now.UnixMilli(), op, a))
			if a != g {
				t.Fatalf("seed %d: %s\nfast path    %s\ngeneral path %s\nthe calls before:\n%s", seed, op, a, g, last(steps, 15))
			}
			if sa, sg := held(fast), held(general); sa != sg {
				t.Fatalf("seed %d: after %s the states differ\nfast path    %s\ngeneral path %s\nthe calls before:\n%s", seed, op, sa, sg, last(steps, 15))
			}
		}
		inPlace += fast.hooks.inPlace
		if general.hooks.inPlace != 0 {
			t.Fatal("the general path's limiter took the fast path")
		}
	}
	if inPlace < seeds*10 {
		t.Fatalf("%d calls of %d seeds took the fast path", inPlace, seeds)
	}
	t.Logf("%d calls took the fast path", inPlace)
}

// held is every state l holds, and its bytes.
func held(l *Limiter) string {
	var out []string
	l.Range(func(k string, s State) bool { out = append(out, fmt.Sprintf("%s %+v", k, s)); return true })
	slices.Sort(out)
	var b int64
	for i := range l.shards {
		b += l.shards[i].bytes
	}
	return fmt.Sprint(out, " bytes=", b)
}

// drained is what Drain reports, sorted.
func drained(l *Limiter) string {
	var out []string
	l.Drain(func(k string, s State) { out = append(out, fmt.Sprintf("%s %+v", k, s)) })
	slices.Sort(out)
	return fmt.Sprint(out)
}

func last(s []string, n int) string { return strings.Join(s[max(0, len(s)-n):], "\n") }
