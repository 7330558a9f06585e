package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testclock"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/multitest"
)

func TestAllowAllContract(t *testing.T) {
	multitest.Run(t, "", func(_ *testing.T, clk ringlimit.Clock) multitest.Limiter {
		return memstore.New(memstore.Config{Clock: clk})
	})
}

// AppendAll keeps the contract, into a slice with room and without.
func TestAppendAllContract(t *testing.T) {
	for _, room := range []bool{true, false} {
		t.Run(fmt.Sprint("room=", room), func(t *testing.T) {
			multitest.Run(t, "", func(t *testing.T, clk ringlimit.Clock) multitest.Limiter {
				return multitest.Appending(t, memstore.New(memstore.Config{Clock: clk}), room)
			})
		})
	}
}

var (
	ctx0 = context.Background()
	t0m  = multitest.T0
)

func TestAllowAllAllocatesOnlyItsResult(t *testing.T) {
	for _, alg := range multitest.Algorithms {
		clk := testclock.New(t0m)
		l := memstore.New(memstore.Config{Clock: clk})
		rules := []ringlimit.Rule{{Algorithm: alg, Limit: 1000, Window: time.Second}, {Algorithm: alg, Limit: 5000, Window: time.Minute}}
		l.AllowAll(ctx0, "hot", rules, 1)
		allocs := testing.AllocsPerRun(500, func() {
			clk.Advance(time.Millisecond)
			l.AllowAll(ctx0, "hot", rules, 1)
		})
		if allocs != 1 {
			t.Errorf("%s: %v allocs per AllowAll on an existing key, want 1 (the result)", alg, allocs)
		}
		var buf [ringlimit.MaxRules]ringlimit.Decision
		allocs = testing.AllocsPerRun(500, func() {
			clk.Advance(time.Millisecond)
			l.AppendAll(ctx0, buf[:0], "hot", rules, 1)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per AppendAll on an existing key into a slice with room, want 0", alg, allocs)
		}
	}
}

// Every state of a key moves with its index: Range, Drain and TakeAll
// report it, Import puts it back at that index, Take and Export see index 0
// only, Reset forgets them all.
func TestStatesCarryTheirIndex(t *testing.T) {
	clk := testclock.New(t0m)
	a := memstore.New(memstore.Config{Clock: clk, TrackChanges: true})
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.SlidingLog, Limit: 20, Window: time.Minute},
		{Algorithm: ringlimit.TokenBucket, Limit: 30, Window: time.Hour},
	}
	if _, err := a.AllowAll(ctx0, "k", rules, 3); err != nil {
		t.Fatal(err)
	}
	want := multitestAnswers(t, a, rules)
	seen := map[int]ringlimit.Algorithm{}
	a.Range(func(key string, s memstore.State) bool {
		seen[s.Index] = s.Algorithm
		return true
	})
	drained := 0
	a.Drain(func(string, memstore.State) { drained++ })
	if len(seen) != 3 || seen[0] != ringlimit.FixedWindow || seen[1] != ringlimit.SlidingLog || seen[2] != ringlimit.TokenBucket || drained != 3 {
		t.Fatalf("Range saw %v, Drain %d states", seen, drained)
	}
	if s, ok := a.Export("k"); !ok || s.Index != 0 || s.Algorithm != ringlimit.FixedWindow {
		t.Fatalf("Export: %+v %v", s, ok)
	}
	states := a.TakeAll("k", nil)
	if len(states) != 3 || a.Has("k") {
		t.Fatalf("TakeAll: %+v; still held: %v", states, a.Has("k"))
	}
	b := memstore.New(memstore.Config{Clock: clk})
	for _, s := range states {
		if !b.Import("k", s) {
			t.Fatalf("Import refused %+v", s)
		}
	}
	if got := multitestAnswers(t, b, rules); got != want {
		t.Fatalf("after TakeAll and Import: %s, want %s", got, want)
	}
	if b.Import("k", memstore.State{Algorithm: ringlimit.FixedWindow, Window: 1000, Index: ringlimit.MaxRules, Until: clk.Now().UnixMilli() + 1000}) {
		t.Fatal("Import took an index past MaxRules")
	}
	s, ok := b.Take("k")
	if !ok || s.Index != 0 || len(s.More) != 2 || s.More[0].Index != 1 || s.More[1].Index != 2 {
		t.Fatalf("Take: %+v %v, want index 0 with 1 and 2 in More", s, ok)
	}
	if st := b.Stats(); st.Keys != 0 {
		t.Fatalf("Take left %d states", st.Keys)
	}
	if !b.Import("k", s) {
		t.Fatal("Import refused what Take gave")
	}
	if got := multitestAnswers(t, b, rules); got != want {
		t.Fatalf("after Take and Import: %s, want %s", got, want)
	}
	if err := b.Reset(ctx0, "k"); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Keys != 0 {
		t.Fatalf("Reset left %d states", st.Keys)
	}
}

func multitestAnswers(t *testing.T, l *memstore.Limiter, rules []ringlimit.Rule) string {
	t.Helper()
	ds, err := l.AllowAll(ctx0, "k", rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, d := range ds {
		d.ResetAfter = 0
		s += fmt.Sprintf("%+v ", d)
	}
	return s
}

// Making room for a key's states never evicts the key's other states: the
// call stays all or nothing even when the limiter is full.
func TestAllowAllNeverEvictsItsOwnStates(t *testing.T) {
	clk := testclock.New(t0m)
	l := memstore.New(memstore.Config{Clock: clk, MaxKeys: 4})
	rules := multitest.Rules(ringlimit.FixedWindow, 5, 50)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		for range 2 {
			if _, err := l.AllowAll(ctx0, k, rules, 2); err != nil {
				t.Fatal(err)
			}
		}
		ds, _ := l.AllowAll(ctx0, k, rules, 0)
		if ds[0].Remaining != 1 || ds[1].Remaining != 46 {
			t.Fatalf("%s: %+v: a state of the key was evicted while it was decided", k, ds)
		}
		if st := l.Stats(); st.Keys > 4 {
			t.Fatalf("%d states held, MaxKeys 4", st.Keys)
		}
	}
}

func TestAllowAllAtUsesItsInstant(t *testing.T) {
	l := memstore.New(memstore.Config{Clock: testclock.New(t0m)})
	rules := multitest.Rules(ringlimit.FixedWindow, 1, 5)
	if ds, err := l.AllowAllAt(t0m, "k", rules, 1); err != nil || !ds[0].Allowed {
		t.Fatal(ds, err)
	}
	if ds, _ := l.AllowAllAt(t0m, "k", rules, 1); ds[0].Allowed {
		t.Fatal("second hit in the same second admitted")
	}
	if ds, _ := l.AllowAllAt(t0m.Add(time.Second), "k", rules, 1); !ds[0].Allowed || ds[1].Remaining != 3 {
		t.Fatalf("a second later: %+v", ds)
	}
	if _, err := l.AllowAllAt(t0m, "k", nil, 1); !errors.Is(err, ringlimit.ErrInvalidRule) {
		t.Fatal(err)
	}
}

// BenchmarkAllowAll sets AllowAll with 2 rules, and AppendAll with 2 rules
// into a slice with room, beside one AllowN on a hot key, per algorithm
// (the bound: ≤ 1.5×).
func BenchmarkAllowAll(b *testing.B) {
	for _, alg := range multitest.Algorithms {
		rules := []ringlimit.Rule{
			{Algorithm: alg, Limit: 1_000_000, Window: time.Second},
			{Algorithm: alg, Limit: 100_000_000, Window: time.Minute},
		}
		for _, name := range []string{"AllowN", "AllowAll-2", "AppendAll-2"} {
			b.Run(alg.String()+"/"+name, func(b *testing.B) {
				clk := testclock.New(t0m)
				l := memstore.New(memstore.Config{Clock: clk})
				var buf [ringlimit.MaxRules]ringlimit.Decision
				b.ReportAllocs()
				for b.Loop() {
					clk.Advance(time.Microsecond)
					switch name {
					case "AllowN":
						l.AllowN(ctx0, "hot", rules[0], 1)
					case "AllowAll-2":
						l.AllowAll(ctx0, "hot", rules, 1)
					default:
						l.AppendAll(ctx0, buf[:0], "hot", rules, 1)
					}
				}
			})
		}
	}
}

// AllowAllHeldAt decides only for a key that holds a live state at one of
// the rules' indexes, and then exactly as AllowAllAt.
func TestAllowAllHeldAt(t *testing.T) {
	l := memstore.New(memstore.Config{Clock: testclock.New(t0m)})
	rules := multitest.Rules(ringlimit.FixedWindow, 2, 5)
	if ds, held, err := l.AllowAllHeldAt(t0m, "k", rules, 1); held || err != nil || ds != nil || l.Stats().Keys != 0 {
		t.Fatalf("absent key: %v %v %v, %d states", ds, held, err, l.Stats().Keys)
	}
	l.AllowAll(ctx0, "k", rules, 1)
	l.Take("k")
	if _, err := l.AllowAll(ctx0, "k", rules[1:], 1); err != nil { // index 0 only, under rules[1]
		t.Fatal(err)
	}
	ds, held, err := l.AllowAllHeldAt(t0m, "k", rules, 1)
	if !held || err != nil || !ds[0].Allowed || ds[1].Remaining != 4 {
		t.Fatalf("held key: %+v %v %v", ds, held, err)
	}
}

// A state whose until has passed is gone, as a value whose TTL ran out is in
// Valkey, whatever rule it was recorded under: AllowAll on such states
// (here all of a key's, at the very instant the last one stops mattering)
// decides as a limiter that never saw the key does, then and on the calls
// after, whether the new rules change the algorithm, the window or only
// the limit (a same-tag state, which a bucket would drain more slowly
// under the lower limit).
func TestAllowAllStaleStatesStartAfresh(t *testing.T) {
	changes := map[string]func(ringlimit.Rule) ringlimit.Rule{
		"limit":  func(r ringlimit.Rule) ringlimit.Rule { r.Limit, r.Burst = 1, r.Capacity(); return r },
		"window": func(r ringlimit.Rule) ringlimit.Rule { r.Window *= 2; return r },
		"algorithm": func(r ringlimit.Rule) ringlimit.Rule {
			r.Algorithm = (r.Algorithm + 1) % ringlimit.SlidingLog // another that keeps no log
			return r
		},
	}
	for _, alg := range multitest.Algorithms {
		if alg == ringlimit.SlidingLog {
			continue // a log never decides in place
		}
		for name, change := range changes {
			t.Run(alg.String()+"/"+name, func(t *testing.T) {
				old := multitest.Rules(alg, 10, 25)
				clk := testclock.New(t0m)
				a := memstore.New(memstore.Config{Clock: clk})
				if ds, err := a.AllowAll(ctx0, "k", old, 10); err != nil || !ds[0].Allowed {
					t.Fatalf("filling: %+v %v", ds, err)
				}
				var last int64
				a.Range(func(_ string, s memstore.State) bool { last = max(last, s.Until); return true })
				clk.Set(time.UnixMilli(last)) // every state stops mattering now
				b := memstore.New(memstore.Config{Clock: clk})
				rules := []ringlimit.Rule{change(old[0]), change(old[1])}
				for step := range 4 {
					da, erra := a.AllowAll(ctx0, "k", rules, 1)
					db, errb := b.AllowAll(ctx0, "k", rules, 1)
					if erra != nil || errb != nil || fmt.Sprint(da) != fmt.Sprint(db) {
						t.Fatalf("step %d: AllowAll on the stale states %+v (%v), on a fresh limiter %+v (%v)", step, da, erra, db, errb)
					}
					clk.Advance(time.Millisecond)
				}
				da, _ := a.AllowN(ctx0, "k", rules[0], 0)
				db, _ := b.AllowN(ctx0, "k", rules[0], 0)
				if da != db {
					t.Fatalf("AllowN after: %+v, fresh %+v", da, db)
				}
			})
		}
	}
}

// A rule that denies stops AllowAll's other rules from recording; those
// whose state no longer matters still report a fresh state's answer.
func TestAllowAllDenialPeeksStaleStatesAfresh(t *testing.T) {
	clk := testclock.New(t0m)
	l := memstore.New(memstore.Config{Clock: clk})
	old := []ringlimit.Rule{
		{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Minute},
		{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second},
	}
	if ds, err := l.AllowAll(ctx0, "k", old, 1); err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("first call: %+v %v", ds, err)
	}
	clk.Advance(100 * time.Millisecond) // index 1 (one hit's 100 ms) stops mattering; index 0 denies
	rules := []ringlimit.Rule{old[0], {Algorithm: ringlimit.TokenBucket, Limit: 1, Burst: 10, Window: time.Second}}
	ds, err := l.AllowAll(ctx0, "k", rules, 1)
	if err != nil || ds[0].Allowed || !ds[1].Allowed || ds[1].Remaining != 10 {
		t.Fatalf("got %+v %v; want index 0 denied, index 1 a full bucket of 10", ds, err)
	}
}

// A denial leaves every state as it was, also one that stopped mattering
// at the call's instant: a call at an earlier instant (a clock that went
// back, or a caller that read the clock before the denied call took the
// lock) still finds it, as it would find the value in Valkey.
func TestAllowAllDenialKeepsStatesForEarlierInstants(t *testing.T) {
	l := memstore.New(memstore.Config{Clock: testclock.New(t0m)})
	a := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Second}
	b := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: 10 * time.Second}
	if ds, err := l.AllowAllAt(t0m.Add(500*time.Millisecond), "k", []ringlimit.Rule{a, b}, 3); err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("filling both: %+v %v", ds, err)
	}
	// At 1 s a's window (and its state) ends; b denies.
	if ds, err := l.AllowAllAt(t0m.Add(time.Second), "k", []ringlimit.Rule{a, b}, 1); err != nil || !ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("at 1 s: %+v %v; want a to admit and b to deny", ds, err)
	}
	if d, _ := l.AllowNAt(t0m.Add(999*time.Millisecond), "k", a, 1); d.Allowed {
		t.Fatalf("at 999 ms a's full window admitted a 4th hit: %+v", d)
	}
}
