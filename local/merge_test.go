package local_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
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
				a, b, one := local.New(local.Config{Clock: clk}), local.New(local.Config{Clock: clk}), local.New(local.Config{Clock: clk})
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
				m := local.New(local.Config{Clock: clk})
				switch {
				case oka && okb:
					m.Import("k", local.Merge(sa, sb))
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

func mustAllow(t *testing.T, l *local.Limiter, at time.Time, rule ringlimit.Rule, want bool) {
	t.Helper()
	d, err := l.AllowNAt(at, "k", rule, 1)
	if err != nil || d.Allowed != want {
		t.Fatalf("AllowNAt = %+v, %v; want allowed %v", d, err, want)
	}
}

// TestMergeDifferentRule: states under different rules do not merge.
func TestMergeDifferentRule(t *testing.T) {
	a := local.State{Algorithm: ringlimit.FixedWindow, Window: 1000, A: 5, B: 3}
	b := local.State{Algorithm: ringlimit.FixedWindow, Window: 2000, A: 5, B: 4}
	if m := local.Merge(a, b); m.B != 3 {
		t.Fatalf("Merge across windows = %+v, want a unchanged", m)
	}
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
