package node_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// BenchmarkQuietPeerHeap reports what a quiet peer costs a node: heap and
// stacks after every node forwarded a call to every other (a full mesh of
// connections) and the mesh then stayed quiet for 2.5 s, per node and
// peer. Run with -benchtime 1x.
func BenchmarkQuietPeerHeap(b *testing.B) {
	for _, n := range []int{2, 8, 16} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			c := nodetest.Start(b, n, func(cfg *node.Config) { cfg.HandoffWindow = 50 * time.Millisecond })
			rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range b.N {
				for _, a := range c.Nodes {
					for _, o := range c.Nodes {
						if o == a {
							continue
						}
						k := keysOwnedBy(a, o.Name(), 1)[0]
						if _, err := a.Allow(ctx, k, rule); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			// The quiet state is what is measured: connections drop their
			// buffers and workers after an idle second.
			time.Sleep(2500 * time.Millisecond)
			runtime.GC()
			runtime.ReadMemStats(&after)
			pairs := float64(n * (n - 1))
			b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/pairs/1024, "heap-KiB/peer")
			b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/pairs/1024, "stack-KiB/peer")
		})
	}
}
