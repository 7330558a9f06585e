package memstore_test

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// testRing is a consistent-hash ring for the RangeArcs benchmark: points
// sorted, each with its member.
type testRing struct {
	points []uint64
	owner  []int
}

func newTestRing(r *rand.Rand, members, vnodes int) *testRing {
	type pt struct {
		h uint64
		m int
	}
	var pts []pt
	for m := range members {
		for range vnodes {
			pts = append(pts, pt{r.Uint64(), m})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int { return cmp.Compare(a.h, b.h) })
	t := &testRing{}
	for _, p := range pts {
		t.points, t.owner = append(t.points, p.h), append(t.owner, p.m)
	}
	return t
}

// at is the index of the point that owns hash h: the first at or after it.
func (t *testRing) at(h uint64) int {
	i, _ := slices.BinarySearch(t.points, h)
	return i % len(t.points)
}

// arcs are member m's arcs.
func (t *testRing) arcs(m int) []memstore.Arc {
	var a []memstore.Arc
	for i, p := range t.points {
		if t.owner[i] == m {
			a = append(a, memstore.Arc{Start: t.points[(i+len(t.points)-1)%len(t.points)], End: p})
		}
	}
	return a
}

// BenchmarkRangeArcs: a node holding 1M keys (member 0 of 4, 256 points
// each) and the work a ring change costs it with RangeArcs (the keys in the
// arcs it gains when a member leaves: none; those it loses when a fifth
// joins), against the full Range a scan of every key costs.
func BenchmarkRangeArcs(b *testing.B) {
	const keys = 1_000_000
	seed := maphash.MakeSeed()
	hash := func(k string) uint64 { return maphash.String(seed, k) }
	r := rand.New(rand.NewPCG(9, 10))
	ring := newTestRing(r, 4, 256)
	l := memstore.New(memstore.Config{MaxKeys: keys + keys/8, Hash: hash})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	for i, held := 0, 0; held < keys; i++ {
		k := fmt.Sprintf("key:%012d", i)
		if ring.owner[ring.at(hash(k))] == 0 {
			l.AllowN(ctx, k, rule, 1)
			held++
		}
	}
	// A fifth member joins: the arcs it takes from member 0, each from the
	// point before it on the new ring.
	joined := &testRing{points: slices.Clone(ring.points), owner: slices.Clone(ring.owner)}
	for range 256 {
		c := r.Uint64()
		i, _ := slices.BinarySearch(joined.points, c)
		joined.points = slices.Insert(joined.points, i, c)
		joined.owner = slices.Insert(joined.owner, i, 4)
	}
	var taken []memstore.Arc
	for _, a := range joined.arcs(4) {
		if ring.owner[ring.at(a.End)] == 0 {
			taken = append(taken, a)
		}
	}
	// Member 1 leaves: the arcs member 0 gains (it holds none of their keys
	// yet; they are handed to it). A node gives RangeArcs only arcs whose
	// owner changed to or from itself: a change that moves none of its keys
	// gives it none.
	var gained []memstore.Arc
	for _, a := range ring.arcs(1) {
		i := ring.at(a.End)
		for ring.owner[i] == 1 {
			i = (i + 1) % len(ring.points)
		}
		if ring.owner[i] == 0 {
			gained = append(gained, a)
		}
	}
	cases := []struct {
		name string
		arcs []memstore.Arc
	}{
		{"leave/arcs-gained", gained},
		{"join/arcs-lost", taken},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for range b.N {
				n = 0
				l.RangeArcs(c.arcs, func(string, memstore.State) bool { n++; return true })
			}
			b.ReportMetric(float64(n), "keys")
			b.ReportMetric(float64(len(c.arcs)), "arcs")
		})
	}
	b.Run("full-Range", func(b *testing.B) {
		n := 0
		for range b.N {
			n = 0
			l.Range(func(string, memstore.State) bool { n++; return true })
		}
		b.ReportMetric(float64(n), "keys")
	})
}
