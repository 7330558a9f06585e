package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// TestDifferentialAllowAll runs random sequences of AllowAll (2 or 3 rules,
// of mixed algorithms, drawn from the differential's rule sets), peeks,
// AllowN on index 0 and Resets, with the clock moving forward, through
// local and remote on one manual clock, and requires identical decisions.
// As in TestDifferential, remote's TTLs are padded and a key whose state at
// some index has stopped mattering is reset by hand on both sides.
func TestDifferentialAllowAll(t *testing.T) {
	_, c := server(t)
	steps := 300
	if testing.Short() {
		steps = 80
	}
	var calls, allowed, denied, split int
	for seed := range uint64(12) {
		st := runDiffAll(t, c, seed, steps)
		calls, allowed, denied, split = calls+st[0], allowed+st[1], denied+st[2], split+st[3]
	}
	t.Logf("%d calls, %d admitted, %d denied, %d denied by some rules only", calls, allowed, denied, split)
	if allowed == 0 || denied == 0 || split == 0 {
		t.Errorf("sequences too tame: %d admitted, %d denied, %d split", allowed, denied, split)
	}
}

func runDiffAll(t *testing.T, c clientT, seed uint64, steps int) [4]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	var rules []ringlimit.Rule
	for range 2 + rng.IntN(2) {
		sets := ruleSets(algorithms[rng.IntN(len(algorithms))])
		set := sets[rng.IntN(min(len(sets), 5))] // the small ones: denials happen
		rules = append(rules, set[rng.IntN(2)])
	}
	minCap := rules[0].Capacity()
	for _, r := range rules {
		minCap = min(minCap, r.Capacity())
	}
	clk := testclock.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC).Add(time.Duration(rng.IntN(100_000)) * time.Millisecond))
	loc := local.New(local.Config{Clock: clk})
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("diffall:%d:", seed)})
	remote.SetTTLPad(rem, 24*3600*1000)
	ctx := context.Background()
	keys := []string{"a", "b"}
	until := map[string]int64{}
	var history []string
	var counts [4]int
	fail := func(format string, args ...any) {
		t.Helper()
		h := history
		if len(h) > 12 {
			h = h[len(h)-12:]
		}
		t.Fatalf("seed %d rules %+v:\n%s\n%s", seed, rules, strings.Join(h, "\n"), fmt.Sprintf(format, args...))
	}
	w := rules[rng.IntN(len(rules))].Window
	for i := range steps {
		switch x := rng.IntN(10); {
		case x < 3:
		case x < 7:
			clk.Advance(time.Duration(rng.Int64N(int64(w/10) + 1)).Truncate(time.Millisecond))
		default:
			clk.Advance(time.Duration(rng.Int64N(int64(w) + 1)).Truncate(time.Millisecond))
		}
		now := clk.Now()
		k := keys[rng.IntN(len(keys))]
		if u, ok := until[k]; ok && now.UnixMilli() >= u {
			mustReset(t, loc, rem, k)
			delete(until, k)
			history = append(history, fmt.Sprintf("%4d expire %s", i, k))
		}
		n := 1 + rng.Int64N(min(minCap, 3))
		switch op := rng.IntN(20); {
		case op == 0:
			mustReset(t, loc, rem, k)
			delete(until, k)
			history = append(history, fmt.Sprintf("%4d reset %s", i, k))
			continue
		case op < 3:
			n = 0
		case op < 5: // AllowN on index 0
			dl, el := loc.AllowN(ctx, k, rules[0], n)
			dr, er := rem.AllowN(ctx, k, rules[0], n)
			history = append(history, fmt.Sprintf("%4d %s AllowN %s n=%d -> %+v", i, now.Format("15:04:05.000"), k, n, dl))
			dr.Source = dl.Source
			if el != nil || er != nil || dl != dr {
				fail("AllowN: local %+v %v\nremote %+v %v", dl, el, dr, er)
			}
			if dl.Allowed {
				until[k] = min(untilOr(until, k), now.UnixMilli()+dl.ResetAfter.Milliseconds())
			}
			continue
		}
		dl, el := loc.AllowAll(ctx, k, rules, n)
		dr, er := rem.AllowAll(ctx, k, rules, n)
		history = append(history, fmt.Sprintf("%4d %s AllowAll %s n=%d -> %+v", i, now.Format("15:04:05.000"), k, n, dl))
		if el != nil || er != nil || len(dl) != len(rules) || len(dr) != len(rules) {
			fail("errors: local %v, remote %v", el, er)
		}
		all, some := true, false
		for j := range dl {
			dr[j].Source = dl[j].Source
			if dl[j] != dr[j] {
				fail("rule %d:\nlocal  %+v\nremote %+v", j, dl[j], dr[j])
			}
			all = all && dl[j].Allowed
			some = some || dl[j].Allowed
		}
		counts[0]++
		switch {
		case all && n > 0:
			counts[1]++
			for _, d := range dl {
				until[k] = min(untilOr(until, k), now.UnixMilli()+d.ResetAfter.Milliseconds())
			}
		case !all:
			counts[2]++
			if some {
				counts[3]++
			}
		}
	}
	return counts
}

func untilOr(m map[string]int64, k string) int64 {
	if u, ok := m[k]; ok {
		return u
	}
	return 1 << 62
}
