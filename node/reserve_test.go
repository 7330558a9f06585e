package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// TestGiveBack: hits a caller charged and gives back come back to the
// key's holder, whether it is this node or a peer; a give whose charge
// the store or the policy decided, or whose window has turned, gives
// nothing; a window never gets back more than it was charged.
func TestGiveBack(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, o := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	remaining := func(key string) int64 {
		t.Helper()
		d, err := a.Peek(ctx, key, rule)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	for _, key := range []string{keysOwnedBy(a, a.Name(), 1)[0], keysOwnedBy(a, o.Name(), 1)[0]} {
		if a.Owner(key) != a.Name() {
			awaitPeerDecision(t, a, key)
		}
		at := time.Now()
		d, err := a.AllowN(ctx, key, rule, 4)
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", key, d, err)
		}
		before := remaining(key)
		if err := a.GiveBack(ctx, key, rule, 4, d, at); err != nil {
			t.Fatal(err)
		}
		if got := remaining(key); got != before+4 {
			t.Fatalf("key owned by %s: remaining %d after the give, want %d", a.Owner(key), got, before+4)
		}
		// Given twice: no more than the limit.
		a.GiveBack(ctx, key, rule, 4, d, at)
		if got := remaining(key); got > 10 {
			t.Fatalf("remaining %d, over the limit", got)
		}
		// Decided by the store or the policy: nothing to give.
		a.AllowN(ctx, key, rule, 3)
		fb := d
		fb.Source = ringlimit.Fallback
		before = remaining(key)
		a.GiveBack(ctx, key, rule, 3, fb, at)
		// A charge in another window: nothing.
		a.GiveBack(ctx, key, rule, 3, d, at.Add(-time.Hour))
		if got := remaining(key); got != before {
			t.Fatalf("remaining %d, want %d: a give that should give nothing gave", got, before)
		}
	}
}

// TestGiveBackEveryAlgorithm: with the cluster's clock still, a charge
// given back leaves every algorithm's key as it was before the charge,
// whether this node or a peer holds it; a leaky bucket's or a sliding
// log's charge that another call's hits followed (a ms later) keeps its
// hits.
func TestGiveBackEveryAlgorithm(t *testing.T) {
	clk := testclock.New(time.UnixMilli(1_765_000_000_000 + 600_000*3 + 1234))
	c := nodetest.Start(t, 2, func(cfg *node.Config) { cfg.Clock = clk })
	a, o := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	keys := map[string][]string{a.Name(): keysOwnedBy(a, a.Name(), 10), o.Name(): keysOwnedBy(a, o.Name(), 10)}
	awaitPeerDecision(t, a, keys[o.Name()][0])
	for alg := ringlimit.TokenBucket; alg <= ringlimit.SlidingWindow; alg++ {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
		for _, owner := range []string{a.Name(), o.Name()} {
			for _, followed := range []bool{false, true} {
				key := keys[owner][0]
				keys[owner] = keys[owner][1:]
				if _, err := a.AllowN(ctx, key, rule, 2); err != nil { // another call's, before
					t.Fatal(err)
				}
				before, _ := a.Peek(ctx, key, rule)
				at := clk.Now()
				d, err := a.AllowN(ctx, key, rule, 3)
				if err != nil || !d.Allowed {
					t.Fatalf("%s: %+v %v", key, d, err)
				}
				want := before.Remaining
				if followed {
					clk.Advance(time.Millisecond)
					a.AllowN(ctx, key, rule, 1) // another call's, a ms after
					want--
					if alg == ringlimit.LeakyBucket || alg == ringlimit.SlidingLog {
						// Its hits are behind, or stamped after, the charge's:
						// the give changes nothing.
						now, _ := a.Peek(ctx, key, rule)
						want = now.Remaining
					}
				}
				if err := a.GiveBack(ctx, key, rule, 3, d, at); err != nil {
					t.Fatal(err)
				}
				if got, _ := a.Peek(ctx, key, rule); got.Remaining != want {
					t.Errorf("%s, key held by %s, another call after it: %v: remaining %d after the give, want %d",
						alg, owner, followed, got.Remaining, want)
				}
			}
		}
	}
}

// TestGiveBackToLease: a charge decided from a lease this node holds goes
// back to that lease, not to the key's holder (whose state lent it).
func TestGiveBackToLease(t *testing.T) {
	var clk *testclock.Clock
	c := frozenCluster(t, 2, func(cfg *node.Config) { clk = cfg.Clock.(*testclock.Clock) })
	a, o := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1_000_000, Window: time.Hour}
	key := keysOwnedBy(a, o.Name(), 1)[0]
	waitFor(t, 10*time.Second, "a lease of the key", func() bool {
		a.Allow(ctx, key, rule)
		_, _, left, ok := node.HeldLease(a, key)
		return ok && left >= 8
	})
	for try := 0; ; try++ {
		_, id, left, _ := node.HeldLease(a, key)
		at := clk.Now()
		d, err := a.AllowN(ctx, key, rule, 2)
		if err != nil || !d.Allowed || d.Source != ringlimit.Local {
			t.Fatalf("not from the lease: %+v %v", d, err)
		}
		if err := a.GiveBack(ctx, key, rule, 2, d, at); err != nil {
			t.Fatal(err)
		}
		_, id2, left2, ok := node.HeldLease(a, key)
		if !ok || id2 != id {
			if try < 20 {
				continue // the lease was replaced meanwhile: again
			}
			t.Fatal("the lease changed at every try")
		}
		if left2 != left {
			t.Fatalf("the lease has %d left after the give, want %d (as before the charge)", left2, left)
		}
		return
	}
}

// TestGiveBackToStore: a charge the central store decided (the owner cut
// off) goes back to the store.
func TestGiveBackToStore(t *testing.T) {
	srv := valkeytest.Start(t)
	c := nodetest.Start(t, 2, func(cfg *node.Config) { cfg.ValkeyAddrs = []string{srv.Addr()} })
	a, b := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	keys := keysOwnedBy(a, b.Name(), 3)
	c.Network.Drop(a.Name(), b.Name())
	waitFor(t, 10*time.Second, "the store", func() bool {
		d, err := a.Allow(ctx, keys[0], ringlimit.Rule{Limit: 1 << 40, Window: time.Second})
		return err == nil && d.Source == ringlimit.Store
	})
	for i, alg := range []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.SlidingWindow} {
		key, rule := keys[1+i], ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
		a.AllowN(ctx, key, rule, 2)
		before, _ := a.Peek(ctx, key, rule)
		at := time.Now()
		d, err := a.AllowN(ctx, key, rule, 3)
		if err != nil || !d.Allowed || d.Source != ringlimit.Store {
			t.Fatalf("%s: not the store's: %+v %v", alg, d, err)
		}
		if err := a.GiveBack(ctx, key, rule, 3, d, at); err != nil {
			t.Fatal(err)
		}
		if got, _ := a.Peek(ctx, key, rule); got.Remaining != before.Remaining || got.Source != ringlimit.Store {
			t.Fatalf("%s: remaining %d (%s) after the give, want %d", alg, got.Remaining, got.Source, before.Remaining)
		}
	}
}
