package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// The nodes start while Valkey is down; a key whose owner cannot be reached
// is decided by the policy until Valkey comes up, then by Valkey, with no
// error at any point.
func TestValkeyStoreComesUpLater(t *testing.T) {
	srv := valkeytest.Start(t)
	srv.Kill()
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.StoreTimeout = 200 * time.Millisecond
	})
	a, b := c.Nodes[0], c.Nodes[1]
	key := keysOwnedBy(a, b.Name(), 1)[0]
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 3, Window: time.Hour}
	c.Network.Drop(a.Name(), b.Name())
	d, err := a.Allow(ctx, key, rule)
	if err != nil || d.Source != ringlimit.Fallback || !d.Allowed {
		t.Fatalf("owner and store down: %+v, %v", d, err)
	}
	srv.Restart()
	var admitted int
	waitFor(t, 10*time.Second, "a decision from Valkey", func() bool {
		d, err := a.Allow(ctx, key, rule)
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == ringlimit.Store && d.Allowed {
			admitted++
		}
		return d.Source == ringlimit.Store
	})
	for range 5 {
		d, err := a.Allow(ctx, key, rule)
		if err != nil || d.Source != ringlimit.Store {
			t.Fatalf("store up: %+v, %v", d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("Valkey admitted %d of Limit 3", admitted)
	}
}

// An owner crashes; the other nodes' callers see decisions from Valkey for
// its keys, exact across the nodes that fall back, until the ring drops it.
func TestOwnerCrashFallsBackToValkey(t *testing.T) {
	srv := valkeytest.Start(t)
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		// Every call of the 40 must reach the store: a store call that
		// outlived the default ceiling (50 ms) under load fell back to the
		// policy (beside busy loops and other work, load average 24). The
		// store's speed is not what this test is about.
		cfg.StoreTimeout = time.Second
	})
	victim, a, b := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	key := keysOwnedBy(a, victim.Name(), 1)[0]
	// Partition the victim's peer links so both survivors fall back, and
	// keep the ring as it is (gossip still flows): the store decides.
	c.Network.Drop(a.Name(), victim.Name())
	c.Network.Drop(b.Name(), victim.Name())
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 10, Window: time.Hour}
	// The store's client is made in the background: wait until both
	// survivors reach it (on another key).
	probe := keysOwnedBy(a, victim.Name(), 2)[1]
	for _, nd := range []*node.Node{a, b} {
		waitFor(t, 10*time.Second, "the store", func() bool {
			d, err := nd.Allow(ctx, probe, rule)
			return err == nil && d.Source == ringlimit.Store
		})
	}
	admitted := 0
	for i := range 40 {
		nd := []*node.Node{a, b}[i%2]
		d, err := nd.Allow(ctx, key, rule)
		if err != nil || d.Source != ringlimit.Store {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("%d admitted across two nodes falling back to Valkey, want 10", admitted)
	}
	node.Crash(victim)
	c.WaitMembers(t, 10*time.Second, a, b)
	d, err := a.Allow(ctx, key, rule)
	if err != nil || d.Source == ringlimit.Store || d.Source == ringlimit.Fallback {
		t.Fatalf("after the ring healed: %+v, %v", d, err)
	}
}
