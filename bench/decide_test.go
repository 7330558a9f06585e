package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecide is one peer at one size, for profiling
// (go test -bench 'Decide/ringlimit/10000' -cpuprofile cpu.out); TestScale
// makes the comparison.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 1_000_000} {
		for _, name := range []string{"ringlimit", "go-limiter", "x/time/rate"} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				// Made here, so that a run of one size pays only for its keys.
				names, asked := keyNames(n), keyNames(n) // asked: other strings, as requests bring
				var p peer
				switch name {
				case "ringlimit":
					p = newRinglimit(n, perSecond)
				case "go-limiter":
					g := newGoLimiter(perSecond)
					defer g.close()
					p = g
				default:
					p = newRate(perSecond)
				}
				for _, k := range names {
					p.take(k)
				}
				r := rand.New(rand.NewPCG(1, 2))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					p.take(asked[r.IntN(len(asked))])
				}
			})
		}
	}
}
