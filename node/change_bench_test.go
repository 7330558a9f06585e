package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ring"
)

// BenchmarkRingChangeNoMove is the work a ring change costs a node that
// holds 1M keys and loses none of them (another member leaves, or joins
// without taking this node's arcs): ring.Moved, then RangeArcs over the arcs
// lost (none). Before node used RangeArcs, every change Ranged every key
// and asked the ring for its owner (Range+Owner below, for comparison).
func BenchmarkRingChangeNoMove(b *testing.B) {
	l := local.New(local.Config{Hash: ring.Hash})
	rule := ringlimit.Rule{Limit: 10, Window: time.Hour}
	before := ring.New([]string{"a", "b", "c", "d"}, 0)
	after := ring.New([]string{"a", "b", "c"}, 0) // d leaves; a loses nothing
	n := 0
	for i := 0; n < 1_000_000; i++ {
		k := fmt.Sprintf("k%d", i)
		if before.Owner(k) == "a" && after.Owner(k) == "a" {
			l.AllowNAt(time.Now(), k, rule, 1)
			n++
		}
	}
	b.Run("Moved+RangeArcs", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, lost := ring.Moved(before, after, "a")
			var arcs []local.Arc
			for _, a := range lost {
				arcs = append(arcs, local.Arc{Start: a.From, End: a.To})
			}
			visited := 0
			l.RangeArcs(arcs, func(string, local.State) bool { visited++; return true })
			if visited != 0 {
				b.Fatalf("visited %d keys", visited)
			}
		}
	})
	b.Run("Range+Owner", func(b *testing.B) {
		for range b.N {
			moved := 0
			l.Range(func(k string, _ local.State) bool {
				if after.Owner(k) != "a" {
					moved++
				}
				return true
			})
			if moved != 0 {
				b.Fatalf("%d keys moved", moved)
			}
		}
	})
}
