package node_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// BenchmarkForwardedSealing measures a forwarded call with the peer link
// sealed (a SecretKey) and in clear (none), side by side in one run, for
// one caller and for 32.
func BenchmarkForwardedSealing(b *testing.B) {
	for _, mode := range []string{"clear", "sealed"} {
		c := nodetest.Start(b, 2, func(cfg *node.Config) {
			cfg.ForwardTimeout = time.Second
			cfg.LeaseHot = -1 // forwarding is measured: a token bucket far under its limit leases
			if mode == "clear" {
				cfg.SecretKey = nil
			}
		})
		a, o := c.Nodes[0], c.Nodes[1]
		keys := keysOwnedBy(a, o.Name(), 1024)
		rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
		a.Allow(ctx, keys[0], rule)
		b.Run(mode+"/1", func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			defer reportCPU(b)()
			for i := range b.N {
				start := time.Now()
				if d, err := a.Allow(ctx, keys[i&1023], rule); err != nil || d.Source != ringlimit.Peer {
					b.Fatalf("%+v, %v", d, err)
				}
				lat = append(lat, time.Since(start))
			}
			report(b, lat)
		})
		b.Run(mode+"/32", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16) // 16 × GOMAXPROCS(2) = 32 callers
			defer reportCPU(b)()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					a.Allow(ctx, keys[i&1023], rule)
					i++
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
}

// reportCPU reports the process's CPU time (user and system, every node in
// it) per operation: on a shared machine it varies less than wall time.
// Call the function it returns when the operations are done.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op") }
}
