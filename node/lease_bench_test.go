package node_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// BenchmarkHotKey: one key hit by 4 callers on each of 5 nodes for a
// second (after two of warm-up), with leases and without (LeaseHot
// -1: today's forwarding): the decisions a second of the owner's 4 callers
// and of the 16 on the other nodes, on the system clock. Run it with
// -benchtime 1x.
func BenchmarkHotKey(b *testing.B) {
	for _, leases := range []bool{true, false} {
		name := "leases"
		if !leases {
			name = "forwarded"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			c := nodetest.Start(b, 5, func(cfg *node.Config) {
				if !leases {
					cfg.LeaseHot = -1
				}
			})
			rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1_000_000_000, Window: 10 * time.Minute}
			const key = "hot"
			owner := c.Nodes[0].Owner(key)
			for range b.N {
				var counting atomic.Bool
				var own, others atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for _, nd := range c.Nodes {
					count := &others
					if nd.Name() == owner {
						count = &own
					}
					for range 4 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							var k int64
							for {
								select {
								case <-stop:
									if counting.Load() {
										count.Add(k)
									}
									return
								default:
								}
								if _, err := nd.Allow(ctx, key, rule); err != nil {
									b.Error(err)
									return
								}
								if counting.Load() {
									k++
								}
							}
						}()
					}
				}
				time.Sleep(2 * time.Second) // warm-up: the leases come
				counting.Store(true)
				start := time.Now()
				time.Sleep(time.Second) // (a benchmark's measured span, not a wait for an event)
				close(stop)
				wg.Wait()
				s := time.Since(start).Seconds()
				b.ReportMetric(float64(own.Load())/s, "owner/s")
				b.ReportMetric(float64(others.Load())/s, "others/s")
				b.ReportMetric(float64(others.Load())/float64(max(own.Load(), 1)), "others/owner")
				b.ReportMetric(float64(own.Load()+others.Load())/s, "total/s")

			}
		})
	}
}
