package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every peer limits: with 10 per second per key, the 11th hit on a key
// within the same instant is denied, and another key is unaffected.
func TestPeersLimit(t *testing.T) {
	gl := newGoLimiter(10)
	defer gl.close()
	for name, p := range map[string]peer{"ringlimit": newRinglimit(100, 10), "go-limiter": gl, "x/time/rate": newRate(10)} {
		for i := range 10 {
			if !p.take("a") {
				t.Fatalf("%s: hit %d of 10 denied", name, i+1)
			}
		}
		if p.take("a") {
			t.Errorf("%s: 11th hit admitted", name)
		}
		if !p.take("b") {
			t.Errorf("%s: another key denied", name)
		}
	}
}

func keyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("key:%012d", i) // 16 bytes
	}
	return names
}

// result is one measurement: wall-clock and process CPU time per decision,
// and heap allocations per decision.
type result struct{ wall, cpu, allocs float64 }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// decide measures n decisions of one peer over random keys: serially (one
// goroutine), or split between two goroutines. CPU time per decision is the
// figure that holds up on a shared machine, where other processes take
// turns on the cores and stretch the wall clock.
func decide(p peer, names []string, goroutines, n int) result {
	var wg sync.WaitGroup
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start, c0 := time.Now(), cpuNow()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g)+1, 2))
			for range n / goroutines {
				p.take(names[r.IntN(len(names))])
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(start), cpuNow()-c0
	runtime.ReadMemStats(&m1)
	return result{float64(wall) / float64(n), float64(cpu) / float64(n), float64(m1.Mallocs-m0.Mallocs) / float64(n)}
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// fill builds a peer and touches every key once, and reports the heap it
// holds per key beyond the key strings (which all share names).
func fill(mk func() peer, names []string) (peer, float64) {
	before := heapNow()
	p := mk()
	for _, k := range names {
		p.take(k)
	}
	return p, float64(heapNow()-before) / float64(len(names))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestScale is the study behind docs/benchmarks.md's "cost as the work grows".
func TestScale(t *testing.T) {
	if os.Getenv("RINGLIMIT_SCALE") == "" {
		t.Skip("set RINGLIMIT_SCALE=1 to run the scale study (about 15 minutes)")
	}
	sizes := []int{1_000, 10_000, 100_000, 1_000_000, 4_000_000}
	if s := os.Getenv("RINGLIMIT_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			var n int
			fmt.Sscan(f, &n)
			sizes = append(sizes, n)
		}
	}
	gated := map[int]bool{10_000: true, 1_000_000: true}
	reps := 5
	if s := os.Getenv("RINGLIMIT_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	peerNames := []string{"ringlimit", "go-limiter", "x/time/rate"}
	var report strings.Builder
	fmt.Fprintf(&report, "| keys | mode | CPU ns/decision: ringlimit | go-limiter | x/time/rate | ringlimit ÷ go-limiter | ÷ x/time/rate | wall ns/decision: ringlimit | go-limiter | x/time/rate | ringlimit ÷ go-limiter | ÷ x/time/rate |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var bytes strings.Builder
	fmt.Fprintf(&bytes, "| keys | ringlimit B/key (of which its copy of the key: 16) | go-limiter B/key | x/time/rate B/key |\n|---|---|---|---|\n")
	for _, n := range sizes {
		// Calls ask with other strings than those the keys were first seen
		// with, as a server's requests do: a peer that keeps the caller's
		// string would otherwise find its keys equal by pointer, without
		// reading them.
		names, asked := keyNames(n), keyNames(n)
		var closers []func()
		mks := []func() peer{
			func() peer { return newRinglimit(n, perSecond) },
			func() peer { g := newGoLimiter(perSecond); closers = append(closers, g.close); return g },
			func() peer { return newRate(perSecond) },
		}
		peers := make([]peer, len(mks))
		perKey := make([]float64, len(mks))
		for i, mk := range mks {
			peers[i], perKey[i] = fill(mk, names)
		}
		fmt.Fprintf(&bytes, "| %d | %.0f | %.0f | %.0f |\n", n, perKey[0], perKey[1], perKey[2])
		for _, goroutines := range []int{1, 2} {
			mode := "serial"
			if goroutines == 2 {
				mode = "2 goroutines"
			}
			// About 0.3 s of CPU per peer and repetition.
			cal := decide(peers[0], asked, goroutines, 100_000)
			ops := max(100_000, int(0.3e9/cal.cpu))
			wall := make([][]float64, len(peers))
			cpu := make([][]float64, len(peers))
			for range reps { // interleaved: every peer once per repetition
				for i, p := range peers {
					r := decide(p, asked, goroutines, ops)
					wall[i] = append(wall[i], r.wall)
					cpu[i] = append(cpu[i], r.cpu)
					if i == 0 && r.allocs > 0.001 {
						t.Errorf("%d keys %s: ringlimit allocates %.3f per decision", n, mode, r.allocs)
					}
				}
			}
			w := []float64{median(wall[0]), median(wall[1]), median(wall[2])}
			c := []float64{median(cpu[0]), median(cpu[1]), median(cpu[2])}
			line := fmt.Sprintf("| %d | %s | %.0f | %.0f | %.0f | %.2f× | %.2f× | %.0f | %.0f | %.0f | %.2f× | %.2f× |", n, mode,
				c[0], c[1], c[2], c[0]/c[1], c[0]/c[2], w[0], w[1], w[2], w[0]/w[1], w[0]/w[2])
			fmt.Fprintln(&report, line)
			t.Logf("%s   cpu: %.0f   wall: %.0f", line, cpu, wall)
			if gated[n] && (c[0] > c[1] || c[0] > c[2]) {
				t.Errorf("%d keys %s: ringlimit %.0f CPU ns per decision is more than a peer's (%.0f, %.0f)", n, mode, c[0], c[1], c[2])
			}
			if gated[n] && (w[0] > w[1] || w[0] > w[2]) {
				t.Errorf("%d keys %s: ringlimit %.0f wall ns per decision is more than a peer's (%.0f, %.0f)", n, mode, w[0], w[1], w[2])
			}
		}
		// ringlimit keeps its own copy of each key (16 bytes here); the peers
		// keep the caller's string. Fixed costs weigh on the small sizes.
		if n >= 1_000_000 && perKey[0]-16 > 96 {
			t.Errorf("%d keys: ringlimit holds %.1f bytes per key beyond its copy of the key, over 96", n, perKey[0]-16)
		}
		for _, c := range closers {
			c()
		}
		runtime.KeepAlive(peers)
	}
	t.Logf("%s\n%s\n(%s: %s)", report.String(), bytes.String(), strings.Join(peerNames, ", "), "median of 5 interleaved repetitions")
}
