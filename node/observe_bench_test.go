//go:build unix

package node_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
)

// BenchmarkOwnedKeyObserved measures the owned-key path of a node nobody
// observes beside one whose decisions are counted and sampled (as with
// package metrics registered): rounds of off and on alternating, so that
// the machine's load falls on both alike. Besides ns/op it reports
// cpu-ns/op, the process's CPU time per decision, which other processes'
// load on a shared machine disturbs far less than the wall clock.
func BenchmarkOwnedKeyObserved(b *testing.B) {
	c := settled(b, 3, nil)
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	off, on := c.Nodes[0], c.Nodes[1]
	on.ObserveDecisions()
	keys := map[*node.Node][]string{off: keysOwnedBy(off, off.Name(), 1024), on: keysOwnedBy(on, on.Name(), 1024)}
	name := map[*node.Node]string{off: "off", on: "on"}
	for range 5 {
		for _, nd := range []*node.Node{off, on} {
			k := keys[nd]
			b.Run("serial/"+name[nd], func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuTime()
				for range b.N {
					nd.Allow(ctx, k[0], rule)
				}
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
		for _, nd := range []*node.Node{off, on} {
			k := keys[nd]
			b.Run("parallel/"+name[nd], func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						nd.Allow(ctx, k[i&1023], rule)
						i++
					}
				})
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the CPU time this process has used, user and system, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
