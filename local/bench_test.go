package local_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
)

// stepClock advances 1µs on every read: time moves, and reading it costs
// next to nothing, so the benchmark measures the limiter.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, c.ns.Add(1000)) }

func benchRule(alg ringlimit.Algorithm) ringlimit.Rule {
	// One hit per µs is exactly the rate, so most calls are admitted.
	return ringlimit.Rule{Algorithm: alg, Limit: 1_000_000, Window: time.Second}
}

// BenchmarkAllowN: one hot key, serial.
func BenchmarkAllowN(b *testing.B) {
	for _, alg := range allAlgorithms {
		for _, clock := range []string{"injected", "system"} {
			b.Run(alg.String()+"/"+clock, func(b *testing.B) {
				c := local.Config{}
				if clock == "injected" {
					clk := new(stepClock)
					clk.ns.Store(t0.UnixNano())
					c.Clock = clk
				}
				l := local.New(c)
				rule := benchRule(alg)
				l.AllowN(ctx, "hot", rule, 1)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					l.AllowN(ctx, "hot", rule, 1)
				}
			})
		}
	}
}

// BenchmarkParallel1MKeys: random keys out of a million, from every core.
// Run with -cpu 1,2 to see it scale.
func BenchmarkParallel1MKeys(b *testing.B) {
	const keys = 1 << 20
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key:%012d", i)
	}
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			clk := new(stepClock)
			clk.ns.Store(t0.UnixNano())
			l := local.New(local.Config{Clock: clk, MaxKeys: keys})
			rule := ringlimit.Rule{Algorithm: alg, Limit: 100, Window: time.Second}
			for _, k := range names {
				l.AllowN(ctx, k, rule, 1)
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 1))
				for pb.Next() {
					l.AllowN(ctx, names[r.IntN(keys)], rule, 1)
				}
			})
		})
	}
}

// BenchmarkMemory reports the heap per key held, over 1M keys, beyond the key
// string itself (16-byte keys: one 16-byte allocation each). For the sliding
// log, each key holds 16 stamps and the figure is everything per stamp.
func BenchmarkMemory(b *testing.B) {
	const keys = 1 << 20
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key:%012d", i) // 16 bytes
	}
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			for range b.N {
				clk := new(stepClock)
				clk.ns.Store(t0.UnixNano())
				rule := ringlimit.Rule{Algorithm: alg, Limit: 64, Window: time.Hour}
				hits := 1
				if alg == ringlimit.SlidingLog {
					hits = 16
				}
				before := heap()
				l := local.New(local.Config{Clock: clk, MaxKeys: keys + keys/8, MaxBytes: 1 << 40})
				for range hits {
					for _, k := range names {
						l.AllowN(ctx, k, rule, 1)
					}
				}
				after := heap()
				perKey := float64(after-before)/keys - 16
				if alg == ringlimit.SlidingLog {
					b.ReportMetric(perKey/float64(hits), "B/stamp")
				} else {
					b.ReportMetric(perKey, "B/key")
				}
				runtime.KeepAlive(l)
			}
		})
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRandomKeys: random keys out of a set of each size, system clock,
// serial; every call admitted, no key expires (bench/ compares the peers).
func BenchmarkRandomKeys(b *testing.B) {
	for _, keys := range []int{1_000, 10_000, 1_000_000} {
		b.Run(fmt.Sprint(keys), func(b *testing.B) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("key:%012d", i)
			}
			l := local.New(local.Config{MaxKeys: keys + keys/8})
			rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: 1000 * time.Second, Burst: 1_000_000}
			for _, k := range names {
				l.AllowN(ctx, k, rule, 1)
			}
			r := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l.AllowN(ctx, names[r.IntN(keys)], rule, 1)
			}
		})
	}
}

// BenchmarkFlood4KiB floods a limiter with 4 KiB keys, 8× what MaxBytes
// holds, and reports the live heap (after GC) at its highest over the
// flood, over MaxBytes.
func BenchmarkFlood4KiB(b *testing.B) {
	const maxBytes = 64 << 20
	long := strings.Repeat("x", ringlimit.MaxKeyLen-12)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	for range b.N {
		before := heap()
		l := local.New(local.Config{MaxBytes: maxBytes})
		n := 8 * maxBytes / ringlimit.MaxKeyLen
		peak := uint64(0)
		for i := range n {
			l.AllowN(ctx, fmt.Sprintf("%s%012d", long, i), rule, 1)
			if i%(n/16) == n/16-1 {
				peak = max(peak, heap()-before)
			}
		}
		b.ReportMetric(float64(peak)/maxBytes, "heap/MaxBytes")
		b.ReportMetric(float64(l.Stats().Keys), "keys")
		runtime.KeepAlive(l)
	}
}

// BenchmarkFloodInUse floods a limiter (MaxBytes 64 MiB) with keys of
// each length, and of lengths from 16 B to 4 KiB at random, 4× what it
// holds, and reports the heap in use (HeapInuse) after GC at its highest
// over the flood, over MaxBytes: what a container's memory limit pays for
// the keys. It also reports the live heap (HeapAlloc) likewise and the
// keys held at the end. TestHeapWithinMaxBytes holds the bound at 8 MiB.
func BenchmarkFloodInUse(b *testing.B) {
	const maxBytes = 64 << 20
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	for _, size := range []int{16, 17, 33, 100, 500, 1000, 2049, 3000, ringlimit.MaxKeyLen, 0} {
		name := fmt.Sprintf("%dB", size)
		if size == 0 {
			name = "mixed"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				r := rand.New(rand.NewPCG(1, uint64(size)))
				before := heapStats()
				l := local.New(local.Config{MaxBytes: maxBytes})
				avg := size
				if avg == 0 {
					avg = ringlimit.MaxKeyLen / 2
				}
				n := 4 * maxBytes / (avg + 96)
				var inuse, alloc uint64
				for i := range n {
					k := size
					if k == 0 {
						k = 16 + r.IntN(ringlimit.MaxKeyLen-16+1)
					}
					id := fmt.Sprintf("%012d", i)
					l.AllowN(ctx, strings.Repeat("x", max(0, k-len(id)))+id, rule, 1)
					if i%(n/8) == n/8-1 {
						m := heapStats()
						inuse, alloc = max(inuse, m.HeapInuse-before.HeapInuse), max(alloc, m.HeapAlloc-before.HeapAlloc)
					}
				}
				b.ReportMetric(float64(inuse)/maxBytes, "inuse/MaxBytes")
				b.ReportMetric(float64(alloc)/maxBytes, "live/MaxBytes")
				b.ReportMetric(float64(l.Stats().Keys), "keys")
				runtime.KeepAlive(l)
			}
		})
	}
}

// BenchmarkFixedCost reports the heap a limiter for 1,000 keys holds before
// its first key, and beyond its keys' own bytes once it holds 1,000 (with
// MaxKeys 1000, and with the default Config).
func BenchmarkFixedCost(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  local.Config
	}{{"MaxKeys1000", local.Config{MaxKeys: 1000}}, {"default", local.Config{}}} {
		b.Run(c.name, func(b *testing.B) {
			rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
			for range b.N {
				before := heap()
				l := local.New(c.cfg)
				empty := heap() - before
				for i := range 1000 {
					l.AllowN(ctx, fmt.Sprintf("key:%012d", i), rule, 1)
				}
				full := heap() - before
				b.ReportMetric(float64(empty), "B-empty")
				b.ReportMetric(float64(full)-float64(l.Stats().Bytes), "B-fixed")
				runtime.KeepAlive(l)
			}
		})
	}
}
