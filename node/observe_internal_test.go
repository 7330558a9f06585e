package node

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// BenchmarkObserveOverhead is what an observed decision adds: the sampling
// draw, the deferred count and, one time in 64, two clock reads. Compare it
// with BenchmarkOwnedKey's whole decision.
func BenchmarkObserveOverhead(b *testing.B) {
	n := &Node{}
	n.ObserveDecisions()
	ctx := context.Background()
	b.ReportAllocs()
	for range b.N {
		func() (d ringlimit.Decision, err error) {
			defer n.observe(ctx, n.obs.start(), &d, &err)
			return ringlimit.Decision{Allowed: true}, nil
		}()
	}
}

// BenchmarkObserveOff is the same closure with nobody observing.
func BenchmarkObserveOff(b *testing.B) {
	n := &Node{}
	ctx := context.Background()
	b.ReportAllocs()
	for range b.N {
		func() (d ringlimit.Decision, err error) {
			if n.obs.on.Load() {
				defer n.observe(ctx, n.obs.start(), &d, &err)
			}
			return ringlimit.Decision{Allowed: true}, nil
		}()
	}
}
