package node

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

var sinkMs int64

// BenchmarkLeaseClock compares the lease's clock reading (Mono, through
// the leaseClock interface) with the wall clock's that it replaced.
func BenchmarkLeaseClock(b *testing.B) {
	b.Run("wall", func(b *testing.B) {
		for range b.N {
			sinkMs += time.Now().UnixMilli()
		}
	})
	b.Run("mono", func(b *testing.B) {
		var c leaseClock = sysLeaseClock{start: time.Now()}
		for range b.N {
			sinkMs += c.Mono()
		}
	})
}

// BenchmarkFromLease is a borrower's decision from its lease.
func BenchmarkFromLease(b *testing.B) {
	n := &Node{}
	n.leases.init()
	n.bgOff = true
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1_000_000_000, Window: time.Hour}
	bw := &borrowed{rule: rule, size: 1 << 60, until: n.leases.clock.Mono() + time.Hour.Milliseconds(), from: "holder", id: 1}
	bw.left.Store(1 << 60)
	n.leases.held["k"] = bw
	n.leases.nheld.Store(1)
	b.ReportAllocs()
	for range b.N {
		if _, ok := n.fromLease("k", rule, 1); !ok {
			b.Fatal("no lease")
		}
	}
}
