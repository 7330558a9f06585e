//go:build linux

package node_test

import (
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/node"
)

// threadCPU is the calling thread's CPU time, to the nanosecond
// (clock_gettime of CLOCK_THREAD_CPUTIME_ID; getrusage counts in ticks).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// BenchmarkOwnedDecisionCPU is BenchmarkOwnedDecision measured as the
// calling thread's CPU time, in rounds that interleave the three cases
// (bare local.AllowN, a node alone, a node after a peer joined, on a key
// it kept), so that a machine loaded by other
// work shifts them alike. It reports the median ns of CPU per call of each
// and the median of the per-round ratios.
func BenchmarkOwnedDecisionCPU(b *testing.B) {
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	l := local.New(local.Config{Clock: newStepClock()})
	steady := settled(b, 1, func(cfg *node.Config) { cfg.Clock = newStepClock() }).Nodes[0]
	joined, kept := keptAfterJoin(b, rule)
	cases := []func(){
		func() { l.AllowN(ctx, "hot", rule, 1) },
		func() { steady.Allow(ctx, "hot", rule) },
		func() { joined.Allow(ctx, kept, rule) },
	}
	_, ns := interleaved(b, 20000, cases...)
	b.ReportMetric(median(ns[0]), "local-cpu-ns")
	b.ReportMetric(median(ns[1]), "steady-cpu-ns")
	b.ReportMetric(median(ns[2]), "join-cpu-ns")
	b.ReportMetric(medianRatio(ns, 1, 0), "steady/local")
	b.ReportMetric(medianRatio(ns, 2, 1), "join/steady")
}

// interleaved runs the cases in rounds, each case per calls a round (after
// one call that is not timed), as many rounds as b.N asks and at least 15,
// on one locked thread, so that a machine loaded by other work shifts them
// alike. It returns the ns per call of each case in each round, in wall
// time and in the calling thread's CPU time.
func interleaved(b *testing.B, per int, cases ...func()) (wall, cpu [][]float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rounds := max(b.N/(per*len(cases)), 15)
	wall, cpu = make([][]float64, len(cases)), make([][]float64, len(cases))
	b.ResetTimer()
	for range rounds {
		for i, f := range cases {
			f()
			t0, w0 := threadCPU(), time.Now()
			for range per {
				f()
			}
			cpu[i] = append(cpu[i], float64(threadCPU()-t0)/float64(per))
			wall[i] = append(wall[i], float64(time.Since(w0))/float64(per))
		}
	}
	b.StopTimer()
	return wall, cpu
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// medianRatio is the median over the rounds of case a's time ÷ case d's.
func medianRatio(ns [][]float64, a, d int) float64 {
	r := make([]float64, len(ns[a]))
	for k := range r {
		r[k] = ns[a][k] / ns[d][k]
	}
	return median(r)
}
