package node_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// stepClock advances 1µs on every read: time moves, and reading it costs
// next to nothing.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, c.ns.Add(1000)) }

func newStepClock() *stepClock {
	c := new(stepClock)
	c.ns.Store(time.Now().UnixNano())
	return c
}

// BenchmarkOwnedDecision measures one owned key, serial, on an injected
// clock, side by side in one run: bare local.AllowN; a node alone
// (steady); and a node after a peer joined, on a key the node kept.
func BenchmarkOwnedDecision(b *testing.B) {
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	run := func(b *testing.B, allow func()) {
		allow()
		allow()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			allow()
		}
	}
	b.Run("local", func(b *testing.B) {
		l := local.New(local.Config{Clock: newStepClock()})
		run(b, func() { l.AllowN(ctx, "hot", rule, 1) })
	})
	b.Run("steady", func(b *testing.B) {
		c := settled(b, 1, func(cfg *node.Config) { cfg.Clock = newStepClock() })
		a := c.Nodes[0]
		run(b, func() { a.Allow(ctx, "hot", rule) })
	})
	b.Run("after-join", func(b *testing.B) {
		a, kept := keptAfterJoin(b, rule)
		run(b, func() {
			if d, _ := a.Allow(ctx, kept, rule); d.Source != ringlimit.Local {
				b.Fatalf("decided by %s", d.Source)
			}
		})
	})
}

// keptAfterJoin starts a node with keys held, has another join, and
// returns the node and a key it kept.
func keptAfterJoin(b *testing.B, rule ringlimit.Rule) (*node.Node, string) {
	c := nodetest.Start(b, 1, func(cfg *node.Config) {
		cfg.Clock = newStepClock()
		cfg.HandoffWindow = time.Hour
	})
	a := c.Nodes[0]
	// Keys held before the join, so that the join moves some away.
	keys := make([]string, 256)
	for i := range keys {
		keys[i] = "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		a.Allow(ctx, keys[i], rule)
	}
	j := c.Add(b)
	for _, k := range keys {
		if j.Owner(k) == a.Name() {
			return a, k
		}
	}
	b.Fatal("no key kept")
	return nil, ""
}
