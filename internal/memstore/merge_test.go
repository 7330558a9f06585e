package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// TestMergeCountsBoth: two limiters admit hits on one key independently;
// the merge of their states admits exactly what one limiter given all the
// hits would admit from then on, for every algorithm.
func TestMergeCountsBoth(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000 + 3_600_000)
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.SlidingLog} {
		for _, split := range [][2]int{{0, 0}, {1, 0}, {2, 3}, {4, 4}, {9, 1}} {
			t.Run(fmt.Sprintf("%v/%d+%d", alg, split[0], split[1]), func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: 24 * time.Hour}
				at := t0
				clk := clockFunc(func() time.Time { return at })
				a, b, one := memstore.New(memstore.Config{Clock: clk}), memstore.New(memstore.Config{Clock: clk}), memstore.New(memstore.Config{Clock: clk})
				for i := range split[0] + split[1] {
					at = at.Add(time.Millisecond)
					l := a
					if i >= split[0] {
						l = b
					}
					mustAllow(t, l, at, rule, true)
					mustAllow(t, one, at, rule, true)
				}
				sa, oka := a.Export("k")
				sb, okb := b.Export("k")
				m := memstore.New(memstore.Config{Clock: clk})
				switch {
				case oka && okb:
					m.Import("k", memstore.Merge(sa, sb))
				case oka:
					m.Import("k", sa)
				case okb:
					m.Import("k", sb)
				}
				// From here both must agree on every later call.
				for range 12 {
					at = at.Add(time.Millisecond)
					dm, _ := m.AllowNAt(at, "k", rule, 1)
					do, _ := one.AllowNAt(at, "k", rule, 1)
					if dm.Allowed != do.Allowed {
						t.Fatalf("at %v: merged allowed=%v, one limiter allowed=%v", at.Sub(t0), dm.Allowed, do.Allowed)
					}
				}
			})
		}
	}
}

func mustAllow(t *testing.T, l *memstore.Limiter, at time.Time, rule ringlimit.Rule, want bool) {
	t.Helper()
	d, err := l.AllowNAt(at, "k", rule, 1)
	if err != nil || d.Allowed != want {
		t.Fatalf("AllowNAt = %+v, %v; want allowed %v", d, err, want)
	}
}

// TestMergeDifferentRule: states under different rules do not merge.
func TestMergeDifferentRule(t *testing.T) {
	a := memstore.State{Algorithm: ringlimit.FixedWindow, Window: 1000, A: 5, B: 3}
	b := memstore.State{Algorithm: ringlimit.FixedWindow, Window: 2000, A: 5, B: 4}
	a.Until, b.Until = 2000, 1000
	if m := memstore.Merge(a, b); m.B != 3 {
		t.Fatalf("Merge across windows = %+v, want a (it matters longer)", m)
	}
	if m := memstore.Merge(b, a); m.B != 3 {
		t.Fatalf("Merge across windows, b first = %+v, want a (it matters longer)", m)
	}
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// TestMergeAcrossWindows: two limiters that admitted in different windows
// of one key (one rolled over, one did not): the merge follows the later
// window and counts what still matters in it, as one limiter would.
func TestMergeAcrossWindows(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000 - 1_700_000_000_000%60_000) // a minute boundary
	for _, alg := range []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Minute}
			at := t0.Add(50 * time.Second)
			clk := clockFunc(func() time.Time { return at })
			a, b, one := memstore.New(memstore.Config{Clock: clk}), memstore.New(memstore.Config{Clock: clk}), memstore.New(memstore.Config{Clock: clk})
			for range 4 { // a: 4 hits late in the first window
				at = at.Add(time.Second)
				mustAllow(t, a, at, rule, true)
				mustAllow(t, one, at, rule, true)
			}
			at = t0.Add(65 * time.Second)
			for range 3 { // b: 3 hits early in the next window
				at = at.Add(time.Second)
				mustAllow(t, b, at, rule, true)
				mustAllow(t, one, at, rule, true)
			}
			sb, _ := b.Export("k")
			merged := []memstore.State{sb}
			if sa, ok := a.Export("k"); ok { // (a fixed window's earlier window no longer matters)
				merged = []memstore.State{memstore.Merge(sa, sb), memstore.Merge(sb, sa)}
			}
			for _, m := range merged {
				l := memstore.New(memstore.Config{Clock: clk})
				l.Import("k", m)
				ref := memstore.New(memstore.Config{Clock: clk})
				so, _ := one.Export("k")
				ref.Import("k", so)
				for i := range 12 {
					at2 := at.Add(time.Duration(i+1) * time.Millisecond)
					dm, _ := l.AllowNAt(at2, "k", rule, 1)
					do, _ := ref.AllowNAt(at2, "k", rule, 1)
					if dm.Allowed && !do.Allowed {
						t.Fatalf("call %d: the merge admits where one limiter denies", i)
					}
					if dm.Allowed != do.Allowed && alg != ringlimit.TokenBucket && alg != ringlimit.LeakyBucket {
						t.Fatalf("call %d: merged allowed=%v, one limiter %v", i, dm.Allowed, do.Allowed)
					}
				}
			}
		})
	}
}

// TestMergeIndexes: states of several indexes (AllowAll) merge index by
// index, whichever index each side has on top.
func TestMergeIndexes(t *testing.T) {
	fw := func(idx int, count int64) memstore.State {
		return memstore.State{Algorithm: ringlimit.FixedWindow, Window: 1000, Index: idx, A: 7, B: count, Until: 9000}
	}
	a := fw(0, 1)
	a.More = []memstore.State{fw(1, 2)}
	b := fw(1, 5) // its index 0 expired: index 1 on top
	b.More = []memstore.State{fw(2, 3)}
	m := memstore.Merge(a, b)
	got := map[int]int64{m.Index: m.B}
	for _, x := range m.More {
		got[x.Index] = x.B
	}
	if want := map[int]int64{0: 1, 1: 7, 2: 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged counts by index %v, want %v", got, want)
	}
	if m.Index != 0 {
		t.Fatalf("index %d on top, want the lowest, 0", m.Index)
	}
}
