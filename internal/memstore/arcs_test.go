package memstore_test

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

func inArc(a memstore.Arc, h uint64) bool {
	switch {
	case a.Start == a.End:
		return true
	case a.Start < a.End:
		return a.Start < h && h <= a.End
	default:
		return h > a.Start || h <= a.End
	}
}

// RangeArcs reports exactly the live keys whose hash is in the arcs, against
// a scan of every key: random arcs, arcs that wrap, the whole ring, arcs
// whose ends fall between keys that share their top 44 bits, and shard
// edges.
func TestRangeArcs(t *testing.T) {
	seed := maphash.MakeSeed()
	hashes := map[string]func(string) uint64{
		"good": func(k string) uint64 { return maphash.String(seed, k) },
		// Hashes that differ only in their top 24 and low 12 bits: many keys share a fragment.
		"clustered": func(k string) uint64 { h := maphash.String(seed, k); return h&(0xffffff<<40) | h&0xfff },
	}
	for name, hash := range hashes {
		clk := testclock.New(t0)
		for _, maxKeys := range []int{1000, 1 << 20} { // one shard, 64 shards
			l := memstore.New(memstore.Config{MaxKeys: maxKeys, Clock: clk, Hash: hash})
			rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
			var keys []string
			for i := range 900 {
				k := fmt.Sprint("key", i)
				keys = append(keys, k)
				l.AllowN(ctx, k, rule, 1+int64(i%3))
			}
			// A key that holds no state is not reported.
			l.Peek(ctx, "peeked", rule)
			r := rand.New(rand.NewPCG(3, 4))
			var sets [][]memstore.Arc
			for range 200 {
				var arcs []memstore.Arc
				for range 1 + r.IntN(4) {
					a := memstore.Arc{Start: r.Uint64(), End: r.Uint64()}
					switch r.IntN(4) {
					case 0: // short, just around a key's hash
						h := hash(keys[r.IntN(len(keys))])
						a = memstore.Arc{Start: h - 1 - uint64(r.IntN(3)), End: h + uint64(r.IntN(3)) - 1}
					case 1: // a shard edge
						e := uint64(r.IntN(64)) << 58
						a = memstore.Arc{Start: e - 1 - uint64(r.IntN(1<<20)), End: e + uint64(r.IntN(1<<20))}
					}
					arcs = append(arcs, a)
				}
				sets = append(sets, arcs)
			}
			sets = append(sets, []memstore.Arc{{5, 5}}, []memstore.Arc{{^uint64(0), 0}}, []memstore.Arc{{0, ^uint64(0)}}, nil)
			for _, arcs := range sets {
				var want, got []string
				for _, k := range keys {
					for _, a := range arcs {
						if inArc(a, hash(k)) {
							want = append(want, k) // once, however many arcs hold it
							break
						}
					}
				}
				l.RangeArcs(arcs, func(k string, s memstore.State) bool {
					if s.Algorithm != ringlimit.FixedWindow || s.B == 0 {
						t.Fatalf("%s: %s has state %+v", name, k, s)
					}
					got = append(got, k)
					return true
				})
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s, MaxKeys %d, arcs %x: got %d keys, want %d", name, maxKeys, arcs, len(got), len(want))
				}
			}
			// f returning false stops it.
			n := 0
			l.RangeArcs([]memstore.Arc{{0, 0}, {0, 0}}, func(string, memstore.State) bool { n++; return false })
			if n != 1 {
				t.Fatalf("%s: RangeArcs went on after false: %d calls", name, n)
			}
			// A key whose state no longer matters is not reported.
			clk.Advance(time.Hour)
			l.RangeArcs([]memstore.Arc{{0, 0}}, func(k string, _ memstore.State) bool {
				t.Fatalf("%s: %s reported after its state stopped mattering", name, k)
				return false
			})
			clk.Set(t0)
		}
	}
}
